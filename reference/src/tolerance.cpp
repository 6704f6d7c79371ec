// Derived tolerances (see docs/tolerance.md) and the element-wise verdict.
#include "attncheck/tolerance.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace attncheck {

namespace {
// Working precision of the computation: f64 problems are computed in f64; every other dtype in at least fp32
// (an implementation that accumulates in fp16/bf16 is a bug we want to catch, not a variant we tolerate).
double compute_u(const Problem& p) { return p.dtype == DType::f64 ? unit_roundoff(DType::f64) : unit_roundoff(DType::f32); }

// Smallest positive (subnormal) value of a dtype: the absolute floor below which no dtype can resolve errors.
double denorm_min(DType t) {
  switch (t) {
    case DType::f64: return std::numeric_limits<double>::denorm_min();
    case DType::f32: return std::numeric_limits<float>::denorm_min();
    case DType::f16: return std::ldexp(1.0, -24);
    case DType::bf16: return std::ldexp(1.0, -133);
    case DType::u8: return 1.0;
  }
  return 0.0;
}

// Rounding error of a sum over the keys (the softmax row sum, the P.V sums) plus the exp and the division. These
// terms all have one sign (exps) or repeat one value (constant V rows), so their rounding errors need not cancel:
// the worst-case bound (Lk - 1)*u of recursive summation applies, not the probabilistic lambda*sqrt(Lk)*u (a
// correct dense implementation exceeded the latter on a constant-V row of 127 keys in the long property run).
double key_sum_error(const Problem& p) { return (static_cast<double>(p.Lk) + 3.0) * compute_u(p); }

// Implementations may flush subnormal intermediates to zero (FTZ, the default of GPU fast-math builds; vectorised
// exp flushes results below the smallest normal): a flushed weight is below the working precision's smallest
// normal number, so outputs made only of such weights may come out as 0.
double flush_floor(const Problem& p) {
  return p.dtype == DType::f64 ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min();
}

// Bound on the absolute error of one score s_ij: a dot product of length Dqk in the working precision
// (probabilistic bound lambda*sqrt(Dqk)*u times sum |q||k| <= |q||k|), plus the scale multiply, softcap and
// bias add (a few more roundings of a value of that magnitude).
double score_error(const Problem& p, const ReferenceResult& r, int64_t row, const ToleranceModel& m) {
  const double u = compute_u(p);
  return (m.lambda * std::sqrt(static_cast<double>(p.Dqk)) + 3.0) * u * r.score_mag[static_cast<size_t>(row)];
}
}  // namespace

std::vector<double> out_tolerance(const Problem& p, const ReferenceResult& r, const ToleranceModel& m) {
  // O_id = sum_j P_ij v_jd. A relative error e in each P_ij (|dP| <= 2*ds*P from the softmax of perturbed scores,
  // plus the sum over Lk terms and the exp) and the P.V sum (key_sum_error) give |dO| <= e * sum_j|P v|.
  // P may be rounded to the input dtype before P.V (FlashAttention, cuDNN do): + u_in * sum_j|P v|.
  // The output is rounded to its dtype once: + u_out * |O|.
  const double u_out = unit_roundoff(p.dtype);
  const double sum_err = key_sum_error(p);
  std::vector<double> tol(r.out.size());
  const int64_t rows = p.B * p.Hq * p.Lq;
  for (int64_t row = 0; row < rows; ++row) {
    const double rel = 2.0 * score_error(p, r, row, m) + sum_err + u_out;
    for (int64_t d = 0; d < p.Dv; ++d) {
      const size_t n = static_cast<size_t>(row * p.Dv + d);
      tol[n] = rel * r.out_abs[n] + u_out * std::abs(r.out[n]) + std::max(denorm_min(p.dtype), flush_floor(p));
    }
  }
  return tol;
}

std::vector<double> lse_tolerance(const Problem& p, const ReferenceResult& r, const ToleranceModel& m) {
  // lse = max + log(sum): the max carries one score error, log(sum) a relative error of the sum
  // (score errors + summation), and the value is stored in stat_dtype.
  const double u = compute_u(p), u_stat = unit_roundoff(p.stat_dtype());
  const double sum_err = key_sum_error(p);
  std::vector<double> tol(r.lse.size());
  for (size_t row = 0; row < tol.size(); ++row)
    tol[row] = 3.0 * score_error(p, r, static_cast<int64_t>(row), m) + sum_err +
               (u_stat + 2.0 * u) * std::abs(r.lse[row]) + denorm_min(p.stat_dtype());
  return tol;
}

std::vector<double> weights_tolerance(const Problem& p, const ReferenceResult& r, const ToleranceModel& m) {
  // Each weight carries a relative error 2*ds + exp + normalisation + storage; masked weights (exactly 0 in the
  // reference) get only the subnormal floor, so a masked weight that leaks fails.
  const double u_stat = unit_roundoff(p.stat_dtype());
  std::vector<double> tol(r.weights.size());
  const int64_t rows = p.B * p.Hq * p.Lq;
  for (int64_t row = 0; row < rows; ++row) {
    const double rel = 2.0 * score_error(p, r, row, m) + key_sum_error(p) + u_stat;
    for (int64_t j = 0; j < p.Lk; ++j) {
      const size_t n = static_cast<size_t>(row * p.Lk + j);
      tol[n] = rel * std::abs(r.weights[n]) +
               (r.weights[n] == 0.0 ? 0.0 : std::numeric_limits<float>::min());  // fp32 exp underflow
    }
  }
  return tol;
}

std::string TensorVerdict::describe() const {
  static const char* names4[] = {"b", "h", "i", "d"};
  static const char* namesw[] = {"b", "h", "i", "j"};
  std::ostringstream o;
  o.precision(9);
  o << tensor << '[';
  for (int k = 0; k < worst_rank; ++k)
    o << (k ? "," : "") << (tensor == "weights" ? namesw[k] : names4[k]) << '=' << worst[static_cast<size_t>(k)];
  o << "]: expected " << expected << " actual " << actual << " |err| " << std::abs(actual - expected)
    << (pass ? " <= " : " > ") << "tol " << tolerance;
  if (!pass) o << " (" << n_bad << " of " << n << " elements outside)";
  return o.str();
}

TensorVerdict compare_values(const std::string& name, const std::vector<int64_t>& shape,
                             const std::vector<double>& expected, const std::vector<double>& actual,
                             const std::vector<double>& tol, const ToleranceModel& m) {
  TensorVerdict v;
  v.tensor = name;
  v.worst_rank = static_cast<int>(shape.size());
  v.n = static_cast<int64_t>(expected.size());
  if (actual.size() != expected.size() || tol.size() != expected.size())
    throw std::invalid_argument(name + ": actual has " + std::to_string(actual.size()) + " elements, expected " +
                                std::to_string(expected.size()));
  double worst_ratio = -1.0;
  size_t worst_n = 0;
  for (size_t n = 0; n < expected.size(); ++n) {
    const double e = expected[n], a = actual[n];
    double err, ratio;
    bool ok;
    if (!std::isfinite(e)) {
      ok = std::isnan(e) ? std::isnan(a) : a == e;
      err = ok ? 0.0 : std::numeric_limits<double>::infinity();
      ratio = ok ? 0.0 : std::numeric_limits<double>::infinity();
    } else if (!std::isfinite(a)) {
      ok = false;
      err = ratio = std::numeric_limits<double>::infinity();
    } else {
      err = std::abs(a - e);
      ok = err <= tol[n];
      ratio = tol[n] > 0 ? err / tol[n] : (err > 0 ? std::numeric_limits<double>::infinity() : 0.0);
      v.max_rel_err = std::max(v.max_rel_err, err / std::max(std::abs(e), m.rel_floor));
    }
    if (std::isfinite(e)) v.max_abs_err = std::max(v.max_abs_err, err);
    if (!ok) {
      ++v.n_bad;
      v.pass = false;
    }
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst_n = n;
    }
  }
  if (!expected.empty()) {
    size_t rest = worst_n;
    for (size_t k = shape.size(); k-- > 0;) {
      v.worst[k] = static_cast<int64_t>(rest % static_cast<size_t>(shape[k]));
      rest /= static_cast<size_t>(shape[k]);
    }
    v.expected = expected[worst_n];
    v.actual = actual[worst_n];
    v.tolerance = tol[worst_n];
  }
  return v;
}

const TensorVerdict& Verdict::worst() const {
  for (const auto& t : tensors)
    if (!t.pass) return t;
  return tensors.front();
}

Verdict judge(const Problem& p, const ReferenceResult& r, const Outputs& actual, const ToleranceModel& m) {
  Verdict v;
  v.tensors.push_back(compare_values("out", {p.B, p.Hq, p.Lq, p.Dv}, r.out, actual.out.to_double(),
                                     out_tolerance(p, r, m), m));
  auto missing = [&](const char* name) {
    TensorVerdict t;
    t.tensor = name;
    t.pass = false;
    t.n_bad = 1;
    v.tensors.push_back(t);
  };
  if (p.want_lse) {
    if (!actual.lse)
      missing("lse");
    else
      v.tensors.push_back(compare_values("lse", {p.B, p.Hq, p.Lq}, r.lse, actual.lse->to_double(),
                                         lse_tolerance(p, r, m), m));
  }
  if (p.want_weights) {
    if (!actual.weights)
      missing("weights");
    else
      v.tensors.push_back(compare_values("weights", {p.B, p.Hq, p.Lq, p.Lk}, r.weights,
                                         actual.weights->to_double(), weights_tolerance(p, r, m), m));
  }
  for (const auto& t : v.tensors) v.pass = v.pass && t.pass;
  return v;
}

}  // namespace attncheck
