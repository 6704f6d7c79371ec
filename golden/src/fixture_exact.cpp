// Exact cases (fixture attribute exact_out, docs/tolerance.md "Exact cases"): the check that a fixture's claim holds,
// so a case judged for equality cannot fail a correct implementation. Called when a case is built and when read.
#include <cmath>
#include <stdexcept>
#include <string>

#include "attncheck/fixture.hpp"

namespace attncheck {

void check_exact_out(const Fixture& f) {
  if (!f.tolerance.exact_out) return;
  const Problem& p = f.problem;
  const ExpectedAttention& r = f.expected;
  auto fail = [&](const std::string& what) { throw std::invalid_argument("exact_out: " + what); };
  if (p.dropout_p > 0)
    fail("dropout rescales by 1/(1-p), which is not exact (dropout_p " + std::to_string(p.dropout_p) + ")");
  if (!p.sinks.empty()) fail("a sink joins the denominator with an inexact exp (sinks given)");
  const bool half = p.dtype == DType::f16 || p.dtype == DType::bf16;
  const size_t rows = r.lse.size(), Dv = static_cast<size_t>(p.Dv);
  if (r.n_terms.size() != rows || r.out.size() != rows * Dv) fail("the reference has no row scales to check against");
  std::vector<char> judged(rows, r.sampled_rows.empty() ? 1 : 0);
  for (size_t bh = 0; bh < rows / static_cast<size_t>(p.Lq) && !r.sampled_rows.empty(); ++bh)
    for (int64_t i : r.sampled_rows) judged[bh * static_cast<size_t>(p.Lq) + static_cast<size_t>(i)] = 1;
  for (size_t row = 0; row < rows; ++row) {
    if (!judged[row]) continue;
    const double n = r.n_terms[row], tied = r.n_tied[row];
    const std::string at = "row " + std::to_string(row) + " ([B,Hq,Lq] flat)";
    // One visible key: p = exp(0) = 1, l = 1, out = v in every dtype. Every visible score tied: p = 1 for each,
    // l = n, out = sum(v)/n; exact in fp32 only without a split-K merge (exp/log factors), so only in 16-bit dtypes,
    // where a few fp32 ulps of the computation stay far below half an output ulp.
    if (n != 1 && !(half && n >= 1 && tied == n))
      fail(at + " has " + std::to_string(static_cast<int64_t>(n)) + " visible keys, " +
           std::to_string(static_cast<int64_t>(tied)) + " tied: an exact case needs one visible key per row (any " +
           "dtype) or every visible score tied (fp16/bf16)");
    for (size_t d = 0; d < Dv; ++d) {
      const double e = r.out[row * Dv + d];
      if (!std::isfinite(e) || round_to(p.dtype, e) != e)
        fail(at + ", d " + std::to_string(d) + ": the answer " + std::to_string(e) + " is not representable in " +
             to_string(p.dtype));
      // A zero from cancelling values is exact only if the cancellation is: fp32 rounding of the terms leaves
      // ~1e-8, which bf16 represents.
      if (n > 1 && e == 0)
        fail(at + ", d " + std::to_string(d) + ": the answer is 0, a cancellation of " +
             std::to_string(static_cast<int64_t>(n)) + " values");
    }
  }
}

}  // namespace attncheck
