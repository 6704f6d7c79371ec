// The judgement of a merged attention state (docs/states.md, "Tolerance of a merged result"): the derived
// per-element bound a candidate's merged state is judged by.
#include "attncheck/state.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "attncheck/dtype_floor.hpp"

namespace attncheck {
inline namespace tolerance {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string row_index(const MergeProblem& p, int64_t r) {
  return std::to_string(r / (p.L * p.H)) + "," + std::to_string((r / p.L) % p.H) + "," + std::to_string(r % p.L);
}

}  // namespace

MergeVerdict judge_merge(const MergeProblem& p, const StoredStates& in, const StoredStates& out) {
  const MergeExpected ex = reference_merge(p, in);
  const State& M = ex.merged;
  const bool norm = p.conv.form == StateForm::normalised;
  const DType odt = p.conv.out_dtype.value_or(p.dtype);
  const double u32 = std::ldexp(1.0, -24), uo = unit_roundoff(odt), N = static_cast<double>(p.N);
  const double ln_b = p.conv.base == LseBase::two ? std::log(2.0) : 1.0;  // d(ln w) per unit of stored exponent
  // Rounding O into its dtype: half a unit relative, or half the subnormal step (fp16 O of tiny values); an fp8 O
  // rounds O / out_scale, so both are in units of the scale. The error of the division itself (one fp32 unit) is
  // within the factor 2 below.
  const double os = p.conv.out_dtype ? p.conv.out_scale : 1.0;
  const auto round_o = [&](double o) { return std::max(uo * std::fabs(o), 0.5 * denorm_min(odt) * os); };
  // The merged O read back from the output (an fp8 element times its scale) and the O the reference expects there
  // (saturated at the fp8 format's largest value, as stored).
  const auto got_o = [&](int64_t r, int64_t d) { return merged_o_from_stored(p.conv, stored_o(out.o, p, -1, r, d)); };
  const auto want_o = [&](double o) { return merged_o_from_stored(p.conv, merged_o_to_stored(p.conv, o)); };
  std::vector<State> ins;
  for (int64_t n = 0; n < p.N; ++n) ins.push_back(decode_state(p, in, n));
  MergeVerdict v;
  auto check = [&](int64_t r, const std::string& what, double expect, double got, double tol) {
    ++v.checked;
    const double err = std::fabs(got - expect);
    const bool ok = got == expect || err <= tol;  // equal infinities pass; NaN never does
    const double ratio = ok ? (tol > 0 ? err / tol : 0) : (std::isfinite(err) && tol > 0 ? err / tol : kInf);
    if (!ok) {
      ++v.failed, v.pass = false;
      if (v.bad_rows.empty() || v.bad_rows.back() != r) v.bad_rows.push_back(r);
    }
    if (!ok && (ratio > v.worst_ratio || v.worst.empty())) {
      v.worst_ratio = ratio;
      v.worst = what + ": expected " + shortest_text(expect) + ", got " + shortest_text(got) + ", |err| " +
                shortest_text(err) + " > tol " + shortest_text(tol);
    }
  };
  const double sentinel = empty_stat_value(p.conv);
  const std::vector<double> mx = merged_exponent(p, in);
  for (int64_t r = 0; r < M.rows(); ++r) {
    std::string at = "[";
    at += row_index(p, r);
    if (M.empty(r)) {  // the merged state is the empty state, bit for bit
      check(r, std::string(norm ? "lse" : "max") + at + "]", sentinel,
            stored_stat(norm ? *out.lse : *out.max, p, -1, r), 0);
      if (!norm) check(r, "sum" + at + "]", 0.0, stored_stat(*out.sum, p, -1, r), 0);
      if (p.conv.empty_out == EmptyOut::zero)
        for (int64_t d = 0; d < p.D; ++d) check(r, "o" + at + "," + std::to_string(d) + "]", 0.0, got_o(r, d), 0);
      continue;
    }
    // Per non-empty input i: x_i its stored exponent, w_i = b^(x_i - X) its weight, E_i the relative error of the
    // weight as fp32 computes it (difference, a base conversion of either operand, exp: 3 units).
    const double X = mx[static_cast<size_t>(r)];
    double S = 0, SE = 0;
    std::vector<double> w(static_cast<size_t>(p.N), 0.0), E(static_cast<size_t>(p.N), 0.0);
    for (int64_t n = 0; n < p.N; ++n) {
      const State& s = ins[static_cast<size_t>(n)];
      if (s.empty(r)) continue;
      const double x = stored_stat(norm ? *in.lse : *in.max, p, n, r);
      w[n] = std::exp(s.m[r] - M.m[r]) * s.l[r];  // the state's share of the merged denominator
      E[n] = u32 * (std::fabs(x - X) + std::fabs(x) + std::fabs(X) + 3.0) * ln_b + (N + 1) * u32;
      S += w[n], SE += w[n] * E[n];
    }
    const double relS = SE / S + N * u32;  // relative error of the merged denominator
    if (norm) {
      const double lse = to_stored_units(p.conv, M.lse(r));
      check(r, "lse" + at + "]", lse, stored_stat(*out.lse, p, -1, r),
            2 * (u32 * (std::fabs(lse) + std::fabs(X) + 2.0) + relS / ln_b));
    } else {
      check(r, "max" + at + "]", X, stored_stat(*out.max, p, -1, r), 0);  // a max of fp32 values is exact
      check(r, "sum" + at + "]", M.l[r], stored_stat(*out.sum, p, -1, r), 2 * (u32 * M.l[r] + SE));
    }
    for (int64_t d = 0; d < p.D; ++d) {
      double spread = 0;  // Σ_i share_i · E_i · |O_i| (normalised) or Σ_i r_i E_i |u_i| (unnormalised)
      for (int64_t n = 0; n < p.N; ++n) {
        const State& s = ins[static_cast<size_t>(n)];
        if (s.empty(r)) continue;
        const double mag = std::fabs(s.u[r * p.D + d]) / s.l[r];  // |O_i|
        spread += w[n] * E[n] * mag;
      }
      const std::string name = "o" + at + "," + std::to_string(d) + "]";
      if (norm) {
        const double o = M.out(r, d);
        check(r, name, want_o(o), got_o(r, d), 2 * (round_o(o) + spread / S + relS * std::fabs(o)));
      } else {
        const double o = M.u[r * p.D + d];  // u_i = O_i·l_i: w_i already holds e^(m_i - m)·l_i
        check(r, name, o, stored_o(out.o, p, -1, r, d), 2 * (round_o(o) + spread));
      }
    }
  }
  return v;
}

}  // namespace tolerance
}  // namespace attncheck
