// The tolerance model: the per-element bound, term by term, from the actual row's error scales (P's root sum of
// squares, the terms of P·V, the keys in the sum, exact ties) and the declared precision contract.
// docs/tolerance.md derives every term; the names here are the names used there.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attncheck/rope.hpp"
#include "attncheck/dtype_floor.hpp"
#include "attncheck/fp8_out.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {
inline namespace tolerance {

double denorm_min(DType t) {
  switch (t) {
    case DType::f64: return std::numeric_limits<double>::denorm_min();
    case DType::f32: return std::numeric_limits<float>::denorm_min();
    case DType::f16: return std::ldexp(1.0, -24);
    case DType::bf16: return std::ldexp(1.0, -133);
    case DType::u8:
    case DType::i8:
    case DType::q4_0:
    case DType::q4_1: return 1.0;
    case DType::e4m3: return std::ldexp(1.0, -9);
    case DType::e5m2: return std::ldexp(1.0, -16);
  }
  return 0.0;
}

namespace {

// Relative error of one exp in the working precision: vectorised and fast-math exps are within 2 ulps (4u).
constexpr double kExpU = 4.0;

// The unit roundoffs of the declared computation. A rounding to a format the value is already exact in costs
// nothing (fp16 inputs under qk=fp16), so each operand rounding counts only where it is coarser.
struct Units {
  double acc, qk, scores, p_round, v_round;
  double p_sub;     // half the subnormal spacing of the P format when P is rounded (fp16, fp8 e5m2, fp8 e4m3), else 0
  bool e4m3_sub;    // p_sub applies below e4m3's smallest normal 2^-6 (out_sub_e4m3), not below 2^-14 (out_sub)
  double descales;  // fp8 inputs: roundings of the descale multiplies (q*k folded into the scale, v or out)
  bool exp2;
  // Rotary embedding: relative angle error per unit of inv_freq * |position| (angle) and the position-independent
  // error of cos, sin and the rotation (trig), per rotated vector; 0 for contract rope=exact.
  double rope_angle, rope_trig;
  double logit;  // the logit stage's roundings of a score, in units (its library entries' facts; 0 without one)
};

Units units(const Problem& p, const ToleranceModel& m) {
  const PrecisionContract c = m.contract ? *m.contract : default_contract(p.dtype);
  // A quantized KV cache's values (code * scale) are exact in no float format: an implementation rounds each
  // decoded k and v element once to its operand format, so k's and v's operand roundings count in full (u_in 0).
  const double u_in = p.kv_quantized() ? 0.0 : unit_roundoff(p.dtype), acc = unit_roundoff(c.accumulate);
  auto coarser = [](double u, double than) { return u > than ? u : 0.0; };
  // Rotated (or QK-normed) q and k are computed values, not inputs: rounding them to the qk operand format always
  // counts.
  const bool rope = uses_rope(p), staged = uses_position_stage(p);
  // fp32 angles: inv_freq from fp32 pow, reciprocal and scaling (<= 4u) and the product with the exact position
  // (u): 5u of the angle. cos and sin within 1 ulp (2u each) and the fp32 rotation x c - y s (3u): 7u. A table in
  // fp16/bf16 adds one rounding of cos and of sin (2 u_T). docs/tolerance.md "Rotary angles".
  const double u32 = unit_roundoff(Precision::fp32);
  double rope_angle = 0, rope_trig = 0;
  if (rope && c.rope != RopeMath::exact) {
    rope_angle = 5.0 * u32;
    rope_trig = 7.0 * u32 + (c.rope == RopeMath::table_fp16   ? 2.0 * unit_roundoff(Precision::fp16)
                             : c.rope == RopeMath::table_bf16 ? 2.0 * unit_roundoff(Precision::bf16)
                             : c.rope == RopeMath::table_fp32 ? 2.0 * u32
                                                              : 0.0);
  }
  // q4_1's decode d q + m is one fp32 rounding (d q is exact there: 15 significant bits) before the rounding to an
  // operand format coarser than fp32: |fl_op(fl32(x)) - x| <= (u_op + u32 (1 + u_op)) |x|. Other codes' decode is
  // the one rounding of the operand term.
  auto decoded = [&](double u_op) {
    return p.kv_quantized() && p.kv_dtype == DType::q4_1 && u_op > u32 ? u_op + u32 * (1 + u_op) : u_op;
  };
  return {acc,
          staged ? unit_roundoff(c.qk_operands) : decoded(coarser(unit_roundoff(c.qk_operands), u_in)),
          coarser(unit_roundoff(c.scores), acc),
          c.p_rounded ? coarser(unit_roundoff(c.pv_operands), acc) : 0.0,
          decoded(coarser(unit_roundoff(c.pv_operands), u_in)),
          !c.p_rounded                           ? 0.0
          : c.pv_operands == Precision::fp16     ? std::ldexp(1.0, -25)
          : c.pv_operands == Precision::fp8_e5m2 ? std::ldexp(1.0, -17)
          : c.pv_operands == Precision::fp8_e4m3 ? std::ldexp(1.0, -10)
                                                 : 0.0,
          c.p_rounded && c.pv_operands == Precision::fp8_e4m3,
          is_fp8(p.dtype) ? 2.0 : 0.0,
          c.exp == ExpFlavour::exp2,
          rope_angle,
          rope_trig,
          ModSet(p).logit_rounding()};
}

// The largest error of one score of the row from the rotary angles (both vectors): rope_max per unit angle error,
// and the trig part through Cauchy-Schwarz (sum_f |q_f| |k_f| <= |q| |k| <= score_mag).
double rope_score(const ExpectedAttention& r, size_t row, const Units& u) {
  if (u.rope_angle == 0 && u.rope_trig == 0) return 0.0;
  return u.rope_angle * (r.rope_max.empty() ? 0.0 : r.rope_max[row]) + 2.0 * u.rope_trig * r.score_mag[row];
}

// Everything the terms need about one row.
struct Row {
  double c_a, c_b, c_c;  // score error per unit of the KeyScales magnitudes a, b, c (c_b: of rounding k, or q)
  double c_s;            // score error per unit of score_mag (the Cauchy-Schwarz bound), for weights and fallbacks
  double c_e;            // relative error of one exp
  double n;              // keys in the sum
  double ties;           // exact ties beyond the first: repeated terms whose rounding errors do not cancel
  double den;            // relative error of the softmax denominator (summation + ties)
  double nonlin;         // (e^y - 1) / y >= 1 for y = twice the worst error of one score: how far a weight's relative
                         // error can exceed its first-order value (the score terms are first order; e^eps - 1 is not)
};

// A result without the row scales (built by hand, not by the reference) gets their upper bounds.
double at(const std::vector<double>& v, size_t n, double fallback) { return v.empty() ? fallback : v[n]; }

Row row_scales(const Problem& p, const ExpectedAttention& r, size_t row, const Units& u, const ToleranceModel& m) {
  Row x{};
  // One score: a length-Dqk dot product (partial sums at most k/Dqk of the magnitude: sqrt(Dqk/3) u; its rounding
  // errors are independent, and so are those of different keys, so one lambda covers the whole weighted sum),
  // q and k rounded to the qk operand format (sqrt(2) u_qk), the score stored, and the scale multiply and max
  // subtraction (3u), +1 with a bias add, + the logit stage's own (a tanh: 2), +1 when log2(e) is folded into the
  // scale.
  const double extra = 3.0 + (p.bias_shape ? 1.0 : 0.0) + u.logit + (u.exp2 ? 1.0 : 0.0) + u.descales;
  x.c_a = u.acc;
  x.c_b = u.qk;  // k's rounding (independent per key) and q's (shared: p_qbar, out_qdev), combined in quadrature
  x.c_c = u.scores + extra * u.acc;
  x.c_s = std::sqrt(static_cast<double>(p.Dqk) / 3.0) * u.acc + std::sqrt(2.0) * u.qk + u.scores + extra * u.acc;
  x.c_e = kExpU * u.acc;
  x.n = r.n_terms.empty() ? static_cast<double>(p.Lk) : r.n_terms[row];
  // A weight moves by w (e^{eps_j - eta} - 1), |eps_j|, |eta| <= y/2 (its own score's error and the denominator's
  // weighted mean), and |e^z - 1| <= |z| (e^y - 1)/y for |z| <= y. Negligible (< 1.01) unless the declared operand
  // format is coarse for the row's logits (bf16 q.k at |s| ~ 1e4: the bound then rightly opens up).
  const double y = 2.0 * (x.c_s * (r.score_mag.empty() ? 0.0 : r.score_mag[row]) + x.c_e + rope_score(r, row, u));
  // Capped so the terms stay finite (a zero term stays zero); at the cap nothing in the row is resolved anyway.
  x.nonlin = y < 1e-8 ? 1.0 : std::min(std::expm1(std::min(y, 700.0)) / y, 1e250);
  x.ties = r.n_tied.empty() ? x.n : std::max(r.n_tied[row] - 1.0, 0.0);
  const double rho = r.p_rss.empty() ? 1.0 : r.p_rss[row];
  // A sum of n positive terms in any order: partial sums grow like k*T/n, the rounding errors like u*|S_k|;
  // lambda * u * sqrt(sum_k S_k^2) = lambda * u * sqrt(n * (T^2/3 + sum t^2/6)) with T = 1 (normalised).
  x.den = m.lambda * u.acc * std::sqrt(x.n * (1.0 / 3.0 + rho * rho / 6.0)) + x.ties * u.acc;
  // A term below u of the running sum is absorbed whole by a sequential or blocked fp32 sum: a one-signed error the
  // random walk does not cover. Its total is at most sum min(w_j, u) over keys with w_j < 2u (p_small, for fp32
  // accumulation; a result without it gets min(1, 2u n)).
  if (u.acc == unit_roundoff(DType::f32)) x.den += at(r.p_small, row, std::min(1.0, 2.0 * u.acc * x.n));
  return x;
}

double floor_of(const Problem& p, DType delivered) {
  // Implementations may flush subnormal intermediates (FTZ, GPU fast-math): below the working precision's
  // smallest normal number nothing is resolved.
  const double flush = p.dtype == DType::f64 ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min();
  return std::max(denorm_min(delivered), flush);
}

TolTerms zero() { return TolTerms{}; }

// An fp8 output (fp8_out.hpp) replaces the storage of O: the kernel holds O' in its working precision w (|O' - O|
// within the other terms, plus w's rounding of O'), multiplies by scale_o (one more rounding of w) and rounds once
// to the fp8 format: at most u_8 of the stored value above the format's normals, half a subnormal step below them
// (in code units: divided by scale_o). The saturation adds nothing, the expected value being saturated alike (a
// clamp moves two values no further apart). u_8 applies to |O'| <= min(|O|, top / scale_o) + the other terms.
void fp8_out_storage(const Problem& p, double O, TolTerms& t) {
  const DType w = p.stat_dtype();
  double rest = 0;
  for (int k = 0; k < kTolTerms; ++k)
    if (k != int(TolTerm::storage) && k != int(TolTerm::floor_)) rest += t[static_cast<size_t>(k)];
  const double top = kv_code_max(p.o_dtype) / p.scale_o, work = 2.0 * unit_roundoff(w) * O;
  t[int(TolTerm::storage)] = work + unit_roundoff(p.o_dtype) * (std::min(O, top) + rest + work);
  t[int(TolTerm::floor_)] = floor_of(p, w) + 0.5 * denorm_min(p.o_dtype) / p.scale_o;
}
}  // namespace

const char* to_string(TolTerm t) {
  switch (t) {
    case TolTerm::scores: return "scores";
    case TolTerm::operands: return "operands";
    case TolTerm::systematic: return "systematic";
    case TolTerm::key_sum: return "key_sum";
    case TolTerm::division: return "division";
    case TolTerm::storage: return "storage";
    case TolTerm::floor_: return "floor";
  }
  return "?";
}

TolTerms out_terms(const Problem& p, const ExpectedAttention& r, size_t n, DType delivered, const ToleranceModel& m) {
  // o_d = sum_j w'_j v_jd. Independent relative errors eps_j of the unnormalised weights move it by
  // sum_j eps_j (w'_j v_jd - w_j o_d): lambda * (c_s * dev_s + c_e * dev) with the row's own deviations.
  if (m.exact_out) return zero();  // an exact case: the representable answer, nothing else
  const Units u = units(p, m);
  const size_t row = n / static_cast<size_t>(p.Dv);
  const Row x = row_scales(p, r, row, u, m);
  const double O = std::abs(r.out[n]), A = r.out_abs[n], sm = r.score_mag[row];
  const double R = at(r.out_rss, n, A), dev = at(r.out_dev, n, A + O);
  const double cov = at(r.out_cov, n, 2.0 * sm * (A + O));
  const double lam = m.lambda;
  const double score_part = r.out_dev_a.empty()
                                ? x.c_s * sm * (A + O)
                                : x.c_a * r.out_dev_a[n] + x.c_c * r.out_dev_c[n] +
                                      x.c_b * std::hypot(r.out_dev_b[n], at(r.out_qdev, n, r.out_dev_b[n]));
  TolTerms t = zero();
  t[int(TolTerm::scores)] = x.nonlin * lam * (score_part + x.c_e * dev);
  // Rotary angle errors: not independent (one angle per position and pair), so summed whole, without lambda.
  if (u.rope_angle > 0 || u.rope_trig > 0)
    t[int(TolTerm::scores)] += x.nonlin * (u.rope_angle * at(r.rope_dev, n, 0.0) + 2.0 * u.rope_trig * sm * (A + O));
  // P and/or V rounded before P·V: independent errors (lambda * rss) unless a few terms dominate (then the
  // worst case, the sum of |terms|, is smaller).
  // Equal P (tied scores) and equal values round alike: their terms add before squaring (out_rss_p, out_rss_v).
  const double Rp = at(r.out_rss_p, n, A), Rv = at(r.out_rss_v, n, A);
  // An unnormalised P below the format's smallest normal (2^-14) errs absolutely, by up to half the subnormal
  // spacing, and moves o_d by that times |v_jd| / l: p_sub * out_sub. (An online kernel's P is relative to the
  // running max, no smaller than the final one, so it is subnormal no more often.)
  // e4m3's subnormals start at 2^-6 (out_sub_e4m3); fp16's and e5m2's at 2^-14 (out_sub).
  const std::vector<double>& sub = u.e4m3_sub ? r.out_sub_e4m3 : r.out_sub;
  t[int(TolTerm::operands)] = std::min(lam * std::hypot(u.p_round * Rp, u.v_round * Rv), (u.p_round + u.v_round) * A) +
                              (sub.empty() ? u.p_sub * A * (u.e4m3_sub ? 0x1.0p6 : 0x1.0p14) : u.p_sub * sub[n]);
  // Every score scaled alike (the scale multiply; with fp8 inputs also descale_q * descale_k folded into it).
  t[int(TolTerm::systematic)] = (2.0 + u.descales) * u.acc * cov;
  // The P·V sum (same partial-sum model with T = o, sum t^2 = rss^2), the denominator, repeated terms.
  t[int(TolTerm::key_sum)] =
      lam * u.acc * std::sqrt(x.n * (O * O / 3.0 + R * R / 6.0)) + O * x.den + x.ties * u.acc * A;
  // The division by l, and with fp8 inputs the descale_v multiply (of each value, at most u of every term: A).
  t[int(TolTerm::division)] = 2.0 * u.acc * O + (u.descales > 0 ? u.acc * A : 0.0);
  t[int(TolTerm::storage)] = unit_roundoff(delivered) * O;
  t[int(TolTerm::floor_)] = floor_of(p, delivered);
  if (p.fp8_out) fp8_out_storage(p, O, t);
  return t;
}

TolTerms lse_terms(const Problem& p, const ExpectedAttention& r, size_t row, DType delivered, const ToleranceModel& m) {
  // lse = log sum_j e^{s_j}: d lse = sum_j P_j eps_j (independent: lambda (c_s rho_s + c_e rho)) + the common
  // score error (2u * score_mag) + the denominator's relative error + the log and the add of the max + storage.
  const Units u = units(p, m);
  const Row x = row_scales(p, r, row, u, m);
  const double L = std::abs(r.lse[row]), sm = r.score_mag[row];
  const double rho = at(r.p_rss, row, 1.0);
  const double score_part = r.p_rss_a.empty()
                                ? x.c_s * sm
                                : x.c_a * r.p_rss_a[row] + x.c_c * r.p_rss_c[row] +
                                      x.c_b * std::hypot(r.p_rss_b[row], at(r.p_qbar, row, r.p_rss_b[row]));
  // The max m and the mean score lie within log(n) of lse (lse - log n <= m <= lse; entropy <= log n).
  const double near_lse = L + std::log(std::max(x.n, 1.0));
  TolTerms t = zero();
  t[int(TolTerm::scores)] = m.lambda * (score_part + x.c_e * rho);
  if (u.rope_angle > 0 || u.rope_trig > 0)  // rotary angles: sum_j w_j |e_j|
    t[int(TolTerm::scores)] += u.rope_angle * at(r.rope_p, row, 0.0) + 2.0 * u.rope_trig * sm;
  // every score scaled alike (scale, fp8 descales) moves lse by s_mean
  t[int(TolTerm::systematic)] = (2.0 + u.descales) * u.acc * std::min(sm, near_lse);
  t[int(TolTerm::key_sum)] = x.den;
  t[int(TolTerm::division)] = 2.0 * u.acc * near_lse;  // log(sum) and the add of the max
  t[int(TolTerm::storage)] = unit_roundoff(delivered) * L;
  t[int(TolTerm::floor_)] = denorm_min(delivered);
  return t;
}

TolTerms weights_terms(const Problem& p, const ExpectedAttention& r, size_t n, DType delivered,
                       const ToleranceModel& m) {
  // P_j = e^{s_j} / D: its own key's error (bounded with the row's largest score magnitude), the denominator's
  // (independent part, systematic, summation), the division and storage. A masked weight (exactly 0) gets no
  // floor: a leak fails.
  const Units u = units(p, m);
  const size_t row = n / static_cast<size_t>(p.Lk);
  const Row x = row_scales(p, r, row, u, m);
  const double P = std::abs(r.weights[n]), sm = r.score_mag[row];
  const double rho = at(r.p_rss, row, 1.0);
  const double others = r.p_rss_a.empty() ? x.c_s * sm
                                          : x.c_a * r.p_rss_a[row] + x.c_c * r.p_rss_c[row] +
                                                x.c_b * std::hypot(r.p_rss_b[row], at(r.p_qbar, row, r.p_rss_b[row]));
  TolTerms t = zero();
  t[int(TolTerm::scores)] = std::min(
      x.nonlin * P * (m.lambda * (x.c_s * sm + others + x.c_e * (1.0 + rho)) + 2.0 * rope_score(r, row, u)), 1.0);
  t[int(TolTerm::systematic)] = P * (4.0 + u.descales) * u.acc * sm;
  t[int(TolTerm::key_sum)] = P * x.den;
  t[int(TolTerm::division)] = P * 2.0 * u.acc;
  t[int(TolTerm::storage)] = P * unit_roundoff(delivered);
  t[int(TolTerm::floor_)] =
      r.weights[n] == 0.0 ? 0.0 : std::max(denorm_min(delivered), double(std::numeric_limits<float>::min()));
  return t;
}

TolTerms scores_terms(const Problem& p, const ExpectedAttention& r, size_t n, DType delivered,
                      const ToleranceModel& m) {
  // One score, as in the softmax's input (row_scales' c_a, c_b, c_c on this key's own magnitudes a, b, |s|);
  // a fill (masked key under stage masked) is exact.
  const Units u = units(p, m);
  const Row x = row_scales(p, r, n / static_cast<size_t>(p.Lk), u, m);
  const double S = std::abs(r.scores[n]);
  TolTerms t = zero();
  const double fill = p.fill == MaskFill::finite ? p.fill_value : -std::numeric_limits<double>::infinity();
  if (!std::isfinite(r.scores[n]) || (p.scores_out == ScoresOut::masked && r.scores[n] == fill)) return t;
  t[int(TolTerm::scores)] = m.lambda * (x.c_a * r.scores_a[n] + std::sqrt(2.0) * x.c_b * r.scores_b[n]) + x.c_c * S +
                            rope_score(r, n / static_cast<size_t>(p.Lk), u);
  t[int(TolTerm::storage)] = unit_roundoff(delivered) * S;
  t[int(TolTerm::floor_)] = floor_of(p, delivered);
  return t;
}

TolTerms max_logit_terms(const Problem& p, const ExpectedAttention& r, size_t n, DType delivered,
                         const ToleranceModel& m) {
  // max_j s'_j - max_j s_j lies within [-e_j*, max_j e_j] (j* the reference's argmax): the largest one-score bound
  // of scores_terms over the row's visible keys, taken with the row's largest a, b and |s| (a bound of it). A row
  // without a finite visible score is the fill: exact up to its storage.
  const Units u = units(p, m);
  const Row x = row_scales(p, r, n, u, m);
  const double S = std::abs(r.max_logit[n]);
  TolTerms t = zero();
  t[int(TolTerm::storage)] = std::isfinite(S) ? unit_roundoff(delivered) * S : 0.0;
  if (r.max_logit_c.empty() || (r.max_logit_a[n] == 0 && r.max_logit_b[n] == 0 && r.max_logit_c[n] == 0)) return t;
  t[int(TolTerm::scores)] = m.lambda * (x.c_a * r.max_logit_a[n] + std::sqrt(2.0) * x.c_b * r.max_logit_b[n]) +
                            x.c_c * r.max_logit_c[n] + rope_score(r, n, u);
  t[int(TolTerm::floor_)] = floor_of(p, delivered);
  return t;
}

namespace {
template <class F>
std::vector<double> sum_terms(size_t count, double scale, F terms) {
  std::vector<double> tol(count);
  for (size_t n = 0; n < count; ++n) {
    const TolTerms t = terms(n);
    double s = 0;
    for (double v : t) s += v;
    tol[n] = s * scale;
  }
  return tol;
}
}  // namespace

std::vector<double> out_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m,
                                  std::optional<DType> delivered) {
  const DType d = delivered.value_or(p.dtype);
  return sum_terms(r.out.size(), m.scale, [&](size_t n) { return out_terms(p, r, n, d, m); });
}

double amax_o_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m) {
  // |max |O'| - max |O|| <= max |O' - O|: the largest bound of O before the fp8 store, in the working precision.
  Problem q = p;
  q.fp8_out = false, q.o_dtype = Problem{}.o_dtype, q.scale_o = 1.0;
  const std::vector<double> tol = out_tolerance(q, r, m, p.stat_dtype());
  double t = 0;
  for (size_t n = 0; n < tol.size(); ++n)
    if (!std::isnan(r.out[n])) t = std::max(t, tol[n]);
  return t;
}

std::vector<double> lse_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m,
                                  std::optional<DType> delivered) {
  const DType d = delivered.value_or(p.stat_dtype());
  return sum_terms(r.lse.size(), m.scale, [&](size_t n) { return lse_terms(p, r, n, d, m); });
}

std::vector<double> scores_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m,
                                     std::optional<DType> delivered) {
  const DType d = delivered.value_or(p.stat_dtype());
  return sum_terms(r.scores.size(), m.scale, [&](size_t n) { return scores_terms(p, r, n, d, m); });
}

std::vector<double> max_logit_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m,
                                        std::optional<DType> delivered) {
  const DType d = delivered.value_or(p.stat_dtype());
  return sum_terms(r.max_logit.size(), m.scale, [&](size_t n) { return max_logit_terms(p, r, n, d, m); });
}

std::vector<double> weights_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m,
                                      std::optional<DType> delivered) {
  const DType d = delivered.value_or(p.stat_dtype());
  return sum_terms(r.weights.size(), m.scale, [&](size_t n) { return weights_terms(p, r, n, d, m); });
}

}  // namespace tolerance
}  // namespace attncheck
