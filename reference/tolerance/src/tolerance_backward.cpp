// The gradient tolerance (docs/backward.md "Tolerance"): per row a relative error eps_i of dS_ij measured against
// its error scale g_ij, then the accumulation of dQ (Lk terms), dK/dV (Hq/Hkv · Lq terms) and dBias (broadcast
// terms), all with the probabilistic lambda·sqrt(n)·u of independent roundings, plus storage and a floor.
#include "attncheck/tolerance_backward.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "attncheck/mods.hpp"
#include "attncheck/rope.hpp"

namespace attncheck {
inline namespace tolerance {

namespace {
struct Units {
  double acc;         // accumulation (dot products, sums)
  double stage;       // relative error of a staged (QK-normed, rotated) q or k element as a kernel forms it; 0 without
  double stage_back;  // relative error of mapping dq, dk back through the stage (against the mapped error scales)
  double round;  // P' and dS rounded to the P·V operand format before the backward GEMMs (FlashAttention-2, cuDNN)
  double out;    // the delivered gradients, and O (D = rowsum(dO∘O) reads the stored O)
  double score;  // the scores and the logit stage's evaluation
  double angle;  // relative error of a RoPE angle under the declared rope contract (0: exact angles)
  double logit;  // the logit stage's roundings of a score, in units (its library entries' facts; 0 without one)
};

// The position stage (docs/backward.md "Score modifications and the position stage"). A staged q or k element is
// a computed value rounded to the qk operand format (u_qk), after: QK-norm, a sum of Dqk squares (sqrt(Dqk) u,
// independent roundings as in the dot products), its square root and reciprocal and two products (4u); RoPE, cos
// and sin and x c - y s (4u) plus the declared angle contract's trig term. Both relative to the vector's
// magnitude, which score_mag (|q| |k|) and the error scales (sums of |terms|) carry: the rotation is orthogonal, so
// it keeps magnitudes. The way back applies the transposed Jacobians: RoPE 4u (cos, sin, two products, a sum),
// QK-norm the sum over Dqk of g w x and three products (sqrt(Dqk) + 6) u. The angle error itself grows with each
// pair's angle, so it is charged per pair and position (docs/backward.md "RoPE angles"): u.angle times the forward's
// rope_max in the scores and GradScales' dq_rope, dk_rope in the gradients.

Units units(const Problem& p, const ToleranceModel& m) {
  const PrecisionContract c = m.contract ? *m.contract : default_contract(p.dtype);
  const double acc = unit_roundoff(c.accumulate), dk = std::sqrt(static_cast<double>(p.Dqk));
  double stage = 0, back = 0, angle = 0;
  if (uses_position_stage(p)) stage = unit_roundoff(c.qk_operands);
  if (uses_qk_norm(p)) stage += (dk + 4.0) * acc, back += (dk + 6.0) * acc;
  if (uses_rope(p)) {
    stage += 4.0 * acc, back += 4.0 * acc;
    const double u32 = unit_roundoff(Precision::fp32);  // the angle contract's terms (tolerance_bound.cpp)
    if (c.rope != RopeMath::exact) {
      const double trig = 7.0 * u32 + (c.rope == RopeMath::table_fp16   ? 2.0 * unit_roundoff(Precision::fp16)
                                       : c.rope == RopeMath::table_bf16 ? 2.0 * unit_roundoff(Precision::bf16)
                                       : c.rope == RopeMath::table_fp32 ? 2.0 * u32
                                                                        : 0.0);
      stage += trig, back += trig, angle = 5.0 * u32;
    }
  }
  return {acc,
          stage,
          back,
          c.p_rounded ? std::max(unit_roundoff(c.pv_operands) - acc, 0.0) : 0.0,
          unit_roundoff(p.dtype),
          unit_roundoff(c.scores),
          angle,
          ModSet(p).logit_rounding()};
}

double floor_of(const Problem& p) {  // flushed subnormals (FTZ) and the smallest step of the delivered dtype
  const double flush = p.dtype == DType::f64 ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min();
  return std::max(flush, p.dtype == DType::f16 ? std::ldexp(1.0, -24) : 0.0);
}

double score_error(const Problem& p, const Units& u) {  // c_s: a score's relative error per unit of score_mag
  const double extra = 4.0 + (p.bias_shape ? 1.0 : 0.0) + u.logit;
  return (std::sqrt(static_cast<double>(p.Dqk) / 3.0) + extra) * u.acc + 2.0 * u.stage;  // q and k staged
}
// The largest score error of a row from the RoPE angles, both vectors': u.angle · rope_max (docs/tolerance.md
// "Rotary angles"). One angle per position and pair, not independent roundings: no lambda.
double angle_score(const ErrorScales& fwd, size_t row, const Units& u) {
  return u.angle > 0 && !fwd.rope_max.empty() ? u.angle * fwd.rope_max[row] : 0.0;
}
// Relative error of the weights P_ij of a row: the score error of key j and of the max (2 · c_s · |s|max), the exp
// (4u) and the denominator, a sum of Lk positive terms (lambda u sqrt(Lk)); the angles' score errors e_j move
// P_ij by e_j + sum_k P_ik e_k.
double p_error(const Problem& p, const ErrorScales& fwd, size_t row, const Units& u, double lambda) {
  const double c_s = score_error(p, u);
  return lambda * (2.0 * c_s * fwd.score_mag[row] + 4.0 * u.acc + u.acc * std::sqrt(static_cast<double>(p.Lk))) +
         2.0 * angle_score(fwd, row, u);
}

// Relative error of dS_ij against g_ij = P(|dP| + |D| + m + M): P's error, dP's length-Dv dot product, D's sum
// (over Lk keys or Dv features, whichever the implementation uses) from the stored O, and dS's rounding.
double ds_error(const Problem& p, const ErrorScales& fwd, size_t row, const Units& u, double lambda) {
  const double n = static_cast<double>(std::max(p.Lk, p.Dv));
  return p_error(p, fwd, row, u, lambda) +
         lambda * u.acc * (std::sqrt(static_cast<double>(p.Dv) / 3.0) + std::sqrt(n)) + 2.0 * u.out + u.round +
         3.0 * u.acc;
}

double accumulation(double n, const Units& u, double lambda) { return lambda * u.acc * std::sqrt(n / 3.0) + u.acc; }

// The logit stage's derivative c (docs/backward.md "Logit stage derivative"), relatively off by its entries'
// dscore_error at the score error δ = (c_s + u)·score_mag (plus the angles').
double chain_relative(const Problem& p, const ModSet& mods, const ErrorScales& fwd, size_t row, const Units& u) {
  if (!mods.has_logit()) return 0.0;
  return mods.logit_dscore_error((score_error(p, u) + u.score) * fwd.score_mag[row] + angle_score(fwd, row, u));
}

// The score modifications' derivative m' at a score off by δ = (c_s + u)·score_mag (plus the angles') moves by
// |m''|·δ: relative to |m'|, mod_curv·δ (GradScales::mod_curv; 0 for the additive library entries, whose m'
// is exactly 1).
double mod_relative(const Problem& p, const ErrorScales& fwd, const GradScales& r, size_t row, const Units& u) {
  if (r.mod_curv.empty()) return 0.0;
  return r.mod_curv[row] * ((score_error(p, u) + u.score) * fwd.score_mag[row] + angle_score(fwd, row, u));
}

// Absorbed MLA (mla.hpp fold_latent_gradient): the latent cache's gradient in K's first Dv columns is dK + dV, so
// its tolerance is the two roles' (t.dk, t.dv, computed above for each alone) plus the rounding of each role's
// part before the sum (|part| <= its abs sum); dv, a view of those columns, gets the same.
void fold_latent_tolerance(const Problem& p, const GradScales& r, double u_out, GradTolerance& t) {
  for (int64_t row = 0; row < p.B * p.Hkv * p.Lk; ++row)
    for (int64_t e = 0; e < p.Dv; ++e) {
      const size_t k = static_cast<size_t>(row * p.Dqk + e), v = static_cast<size_t>(row * p.Dv + e);
      t.dk[k] += t.dv[v] + u_out * (r.dk_abs[k] + r.dv_abs[v]);
      t.dv[v] = t.dk[k];
    }
}
}  // namespace

GradTolerance grad_tolerance(const Problem& p, const ErrorScales& fwd, const ExpectedGradients& r,
                             const ToleranceModel& m) {
  const Units u = units(p, m);
  const ModSet mods(p);
  if (u.angle > 0 && (r.dq_rope.size() != r.dq.size() || r.dk_rope.size() != r.dk.size()))
    throw std::invalid_argument(
        "grad_tolerance: the rope contract needs the RoPE angle sensitivities dq_rope and dk_rope "
        "(expected_gradients computes them)");
  const double fl = floor_of(p), lam = m.lambda;
  const int64_t G = p.group_size(), rows = p.B * p.Hq * p.Lq;
  GradTolerance t;
  // dK, dV and dBias collect rows of different error: take the largest eps of the rows that feed them.
  std::vector<double> eps_ds(static_cast<size_t>(rows)), eps_p(eps_ds), eps_c(eps_ds);
  for (int64_t row = 0; row < rows; ++row) {
    eps_ds[static_cast<size_t>(row)] = ds_error(p, fwd, static_cast<size_t>(row), u, lam);
    eps_p[static_cast<size_t>(row)] = p_error(p, fwd, static_cast<size_t>(row), u, lam);
    eps_c[static_cast<size_t>(row)] = chain_relative(p, mods, fwd, static_cast<size_t>(row), u) +
                                      mod_relative(p, fwd, r, static_cast<size_t>(row), u);
  }
  t.dq.resize(r.dq.size());
  const double acc_q = accumulation(static_cast<double>(p.Lk), u, lam) + u.stage + u.stage_back;
  // The absolute error of c as a kernel forms it (its entries' dscore_abs) multiplies the unchained sums.
  const bool cap = mods.has_logit();
  const double chain_abs = mods.logit_dscore_abs();
  for (size_t n = 0; n < r.dq.size(); ++n) {
    const size_t row = n / static_cast<size_t>(p.Dqk);
    t.dq[n] = (eps_ds[row] + eps_c[row] + acc_q) * r.dq_abs[n] + u.out * std::abs(r.dq[n]) + fl;
    if (u.angle > 0) t.dq[n] += u.angle * r.dq_rope[n];
    if (cap) t.dq[n] += chain_abs * u.score * r.dq_abs_unchained[n];
  }
  const double acc_kv = accumulation(static_cast<double>(G * p.Lq), u, lam);
  const double stage_k = u.stage + u.stage_back;  // dK sums staged q rows, then maps back
  t.dk.resize(r.dk.size());
  t.dv.resize(r.dv.size());
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t kvh = 0; kvh < p.Hkv; ++kvh) {
      double e_ds = 0, e_p = 0, e_c = 0;
      for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h)
        for (int64_t i = 0; i < p.Lq; ++i) {
          const size_t row = static_cast<size_t>((b * p.Hq + h) * p.Lq + i);
          e_ds = std::max(e_ds, eps_ds[row]);
          e_p = std::max(e_p, eps_p[row]);
          e_c = std::max(e_c, eps_c[row]);
        }
      const size_t k0 = static_cast<size_t>((b * p.Hkv + kvh) * p.Lk * p.Dqk), nk = static_cast<size_t>(p.Lk * p.Dqk);
      for (size_t n = k0; n < k0 + nk; ++n) {
        t.dk[n] = (e_ds + e_c + acc_kv + stage_k) * r.dk_abs[n] + u.out * std::abs(r.dk[n]) + fl;
        if (u.angle > 0) t.dk[n] += u.angle * r.dk_rope[n];
        if (cap) t.dk[n] += chain_abs * u.score * r.dk_abs_unchained[n];
      }
      const size_t v0 = static_cast<size_t>((b * p.Hkv + kvh) * p.Lk * p.Dv), nv = static_cast<size_t>(p.Lk * p.Dv);
      for (size_t n = v0; n < v0 + nv; ++n)
        t.dv[n] = (e_p + u.round + acc_kv) * r.dv_abs[n] + u.out * std::abs(r.dv[n]) + fl;
    }
  if (p.mla) fold_latent_tolerance(p, r, u.out, t);
  if (!r.dbias.empty()) {
    const std::vector<int64_t> bs = grad_shape(p, 3);
    const double n_in = static_cast<double>((bs[0] == 1 ? p.B : 1) * (bs[1] == 1 ? p.Hq : 1) * (bs[2] == 1 ? p.Lq : 1) *
                                            (bs[3] == 1 ? p.Lk : 1));
    double e_ds = 0;  // the bias is added before the score modifications: their derivative's error counts
    for (int64_t row = 0; row < rows; ++row)
      e_ds = std::max(e_ds, eps_ds[size_t(row)] + mod_relative(p, fwd, r, static_cast<size_t>(row), u));
    const double acc_b = accumulation(n_in, u, lam), u_b = unit_roundoff(p.bias_dtype);
    t.dbias.resize(r.dbias.size());
    for (size_t n = 0; n < r.dbias.size(); ++n)
      t.dbias[n] = (e_ds + acc_b) * r.dbias_abs[n] + u_b * std::abs(r.dbias[n]) + fl;
  }
  for (auto* v : {&t.dq, &t.dk, &t.dv, &t.dbias})
    for (double& x : *v) x *= m.scale;
  return t;
}

Verdict judge_backward(const Problem& p, const ErrorScales& fwd, const ExpectedGradients& r, const Gradients& actual,
                       const ToleranceModel& m) {
  const GradTolerance t = grad_tolerance(p, fwd, r, m);
  Verdict v;
  v.tensors.push_back(compare_values("dq", grad_shape(p, 0), r.dq, actual.dq.to_double(), t.dq, m));
  v.tensors.push_back(compare_values("dk", grad_shape(p, 1), r.dk, actual.dk.to_double(), t.dk, m));
  v.tensors.push_back(compare_values("dv", grad_shape(p, 2), r.dv, actual.dv.to_double(), t.dv, m));
  if (p.bias_shape) {
    if (actual.dbias) {
      v.tensors.push_back(compare_values("dbias", grad_shape(p, 3), r.dbias, actual.dbias->to_double(), t.dbias, m));
    } else {
      TensorVerdict missing;
      missing.tensor = "dbias";
      missing.pass = false;
      missing.n_bad = 1;
      v.tensors.push_back(missing);
    }
  }
  for (const auto& tv : v.tensors) v.pass = v.pass && tv.pass;
  return v;
}

}  // namespace tolerance
}  // namespace attncheck
