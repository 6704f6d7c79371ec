// The checks that need no reference (tolerance.hpp, reference_free_checks): when the reference computed sampled
// rows only, every row of the candidate's result still has to be finite, have a sane lse and weights summing to 1.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "attncheck/tolerance.hpp"

namespace attncheck {
inline namespace tolerance {

TensorVerdict reference_free_checks(const Problem& p, const Outputs& actual) {
  TensorVerdict v;
  v.tensor = "all_rows";
  v.worst_rank = 3;
  const std::vector<double> out = actual.out.to_double();
  const std::vector<double> lse = actual.lse ? actual.lse->to_double() : std::vector<double>{};
  const std::vector<double> w = actual.weights ? actual.weights->to_double() : std::vector<double>{};
  const double u_acc = unit_roundoff(p.dtype == DType::f64 ? DType::f64 : DType::f32);
  const double u_w = actual.weights ? unit_roundoff(actual.weights->dtype) : 0.0;
  auto fail = [&](int64_t row, double expected, double got, double tol) {
    if (v.n_bad++ == 0) {
      v.worst = {row / (p.Hq * p.Lq), (row / p.Lq) % p.Hq, row % p.Lq, 0};
      v.expected = expected, v.actual = got, v.tolerance = tol;
    }
    v.pass = false;
  };
  for (int64_t row = 0; row < p.B * p.Hq * p.Lq; ++row) {
    ++v.n;
    const double l = lse.empty() ? 0.0 : lse[static_cast<size_t>(row)];
    if (std::isnan(l) || l == INFINITY) {
      fail(row, -INFINITY, l, 0);
      continue;
    }
    bool finite = true, all_nan = true;
    for (int64_t d = 0; d < p.Dv; ++d) {
      finite = finite && std::isfinite(out[static_cast<size_t>(row * p.Dv + d)]);
      all_nan = all_nan && std::isnan(out[static_cast<size_t>(row * p.Dv + d)]);
    }
    // A row the candidate reports fully masked (lse -inf, or a NaN row without lse) may be NaN under the nan policy.
    const bool reported_empty = p.fully_masked == FullyMasked::nan && (lse.empty() ? all_nan : l == -INFINITY);
    if (!finite && !reported_empty) {
      for (int64_t d = 0; d < p.Dv; ++d)
        if (!std::isfinite(out[static_cast<size_t>(row * p.Dv + d)])) {
          fail(row, 0, out[static_cast<size_t>(row * p.Dv + d)], INFINITY);
          break;
        }
      continue;
    }
    if (w.empty() || !std::isfinite(l) || !finite) continue;
    double sum = 0;  // weights: the rounding of each (u_w of the sum) and of the candidate's denominator (Lk u)
    for (int64_t j = 0; j < p.Lk; ++j) sum += w[static_cast<size_t>(row * p.Lk + j)];
    // A sink takes exp(sink - lse) of the row and leaves the keys the rest (docs/problem-model.md).
    const double sink = p.sink((row / p.Lq) % p.Hq), target = sink == -INFINITY ? 1.0 : 1.0 - std::exp(sink - l);
    const double tol = u_w + static_cast<double>(p.Lk) * u_acc * (1.0 + (1.0 - target) * std::max(1.0, std::abs(l)));
    if (!(std::abs(sum - target) <= tol)) fail(row, target, sum, tol);
  }
  return v;
}

}  // namespace tolerance
}  // namespace attncheck
