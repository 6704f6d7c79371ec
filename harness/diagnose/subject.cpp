// Builds the Subject: flattens the candidate's outputs, applies the tolerance model element by element, and
// recomputes the visible scores in double (the same definitions as the reference, the position stage included;
// used only to locate errors).
#include "subject.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "attncheck/block_mask.hpp"
#include "attncheck/fp8_out.hpp"
#include "attncheck/rope.hpp"

namespace attncheck::diagnose {

namespace {
void mark(const std::vector<double>& e, const std::vector<double>& a, const std::vector<double>& t,
          std::vector<char>& bad, int64_t& n) {
  bad.assign(e.size(), 0);
  if (a.size() != e.size()) return;
  for (size_t k = 0; k < e.size(); ++k) n += bad[k] = is_bad(e[k], a[k], t[k]);
}

// q (query) or k as [B, H, L, Dqk] doubles after the position stage (QK-norm, then RoPE at each row's position), as
// the reference's scores read them: a score modelled from the raw inputs is another problem's score.
std::vector<double> staged(const Problem& p, const Tensor& t, bool query) {
  const int64_t H = query ? p.Hq : p.Hkv, L = query ? p.Lq : p.Lk, D = p.Dqk;
  std::vector<double> x(static_cast<size_t>(p.B * H * L * D));
  const RopeStage stage(p);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        double* xi = &x[static_cast<size_t>(((b * H + h) * L + i) * D)];
        for (int64_t d = 0; d < D; ++d) xi[d] = t.at(b, h, i, d);
        if (stage.on()) query ? stage.query(b, i, xi) : stage.key(b, i, xi);
      }
  return x;
}
}  // namespace

Subject::Subject(const prop::Case& cs, const ExpectedAttention& r, const Outputs& actual, const ToleranceModel& m)
    : c(cs), ref(r), mods(cs.p) {
  const Problem& p = c.p;
  model = m, out_dtype = actual.out.dtype, lse_dtype = actual.lse ? actual.lse->dtype : p.stat_dtype();
  out = actual.out.to_double();
  if (p.fp8_out)
    for (double& x : out) x = fp8_out_value(p, x);
  if (actual.lse && p.want_lse) lse = actual.lse->to_double();
  if (actual.weights && p.want_weights && !r.weights.empty()) w = actual.weights->to_double();
  tol_out = out_tolerance(p, r, m, actual.out.dtype);
  if (p.fp8_out) {
    std::vector<double> saturated = r.out;
    for (double& x : saturated) x = fp8_out_saturated(p, x);
    mark(saturated, out, tol_out, bad_out, n_bad_out);
    if (actual.amax_o && r.sampled_rows.empty()) {
      amax = actual.amax_o->to_double(), amax_expected = {fp8_out_amax(r.out)}, tol_amax = {amax_o_tolerance(p, r, m)};
      mark(amax_expected, amax, tol_amax, bad_amax, n_bad_amax);
    }
  } else {
    mark(r.out, out, tol_out, bad_out, n_bad_out);
  }
  if (!lse.empty()) {
    tol_lse = lse_tolerance(p, r, m, actual.lse->dtype);
    mark(r.lse, lse, tol_lse, bad_lse, n_bad_lse);
  }
  if (!w.empty()) {
    tol_w = weights_tolerance(p, r, m, actual.weights->dtype);
    mark(r.weights, w, tol_w, bad_w, n_bad_w);
  }
  if (actual.max_logit && p.max_logit != MaxLogitOut::none && !r.max_logit.empty() && r.sampled_rows.empty()) {
    ml = actual.max_logit->to_double();
    ml_expected = r.max_logit, tol_ml = max_logit_tolerance(p, r, m, actual.max_logit->dtype);
    if (p.max_logit == MaxLogitOut::heads) {  // as judge(): each head's max, within its rows' largest tolerance
      std::vector<double> t(static_cast<size_t>(p.Hq), 0.0);
      for (size_t n = 0; n < tol_ml.size(); ++n) {
        double& x = t[n / static_cast<size_t>(p.Lq) % static_cast<size_t>(p.Hq)];
        x = std::max(x, tol_ml[n]);
      }
      ml_expected = max_logit_heads(p, ml_expected), tol_ml = std::move(t);
    }
    mark(ml_expected, ml, tol_ml, bad_ml, n_bad_ml);
  }
  const int64_t Lk = p.Lk;
  vis.assign(static_cast<size_t>(rows() * Lk), 0);
  score.assign(vis.size(), std::numeric_limits<double>::quiet_NaN());
  logit.assign(vis.size(), 0.0);
  row_max.assign(static_cast<size_t>(rows()), -std::numeric_limits<double>::infinity());
  row_visible.assign(static_cast<size_t>(rows()), 0);
  const double scale = p.effective_scale();
  const DenseMask dense(p, c.in);  // every mask as the reference composes it, the modifications' included
  const std::vector<double> q = staged(p, c.in.q, true), k = staged(p, c.in.k, false);
  std::vector<char> seen(static_cast<size_t>(Lk));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        const int64_t row = (b * p.Hq + h) * p.Lq + i;
        const double* qi = &q[static_cast<size_t>(row * p.Dqk)];
        const double* kb = &k[static_cast<size_t>((b * p.Hkv + p.kv_head(h)) * Lk * p.Dqk)];
        dense.row(b, h, i, seen.data());
        for (int64_t j = 0; j < Lk; ++j) {
          double s = 0;
          for (int64_t d = 0; d < p.Dqk; ++d) s += qi[d] * kb[j * p.Dqk + d];
          s *= scale;
          logit[static_cast<size_t>(row * Lk + j)] = s;
          if (!seen[static_cast<size_t>(j)]) continue;
          const ModAt at{b, h, i, p.row_keys(b, i).diag, j};
          if (mods.has_logit()) s = mods.logit(at, s);
          if (c.in.bias) s += c.in.bias->get_offset(broadcast_offset(*c.in.bias, b, h, i, j));
          if (mods.has_score()) s = mods.score(at, s);
          const size_t n = static_cast<size_t>(row * Lk + j);
          vis[n] = 1, score[n] = s;
          row_max[static_cast<size_t>(row)] = std::max(row_max[static_cast<size_t>(row)], s);
          ++row_visible[static_cast<size_t>(row)];
        }
      }
}

// A prediction is not the reference: besides the reference's tolerance it gets the rounding a kernel computing
// it in working precision would add (4 units of the output's roundoff on the element and on its row's largest).
// A failing element counts as explained only when the prediction itself fails there (is outside the reference's
// tolerance): otherwise that slack alone would let a prediction equal to the reference (a bug this problem cannot
// show, e.g. a fully-masked-row policy on a problem without such rows) "explain" every small error.
int64_t Subject::bad_against(const std::vector<double>& expected, const std::vector<double>* tol) const {
  int64_t n = 0;
  if (expected.size() != out.size()) return n_bad_out;
  const double u = c.p.dtype == DType::f64 ? unit_roundoff(DType::f64)
                                           : std::max(unit_roundoff(DType::f32), unit_roundoff(c.p.dtype));
  const size_t D = static_cast<size_t>(c.p.Dv);
  for (size_t r = 0; r * D < out.size(); ++r) {
    double amax = 0;
    for (size_t k = r * D; k < (r + 1) * D; ++k)
      amax = std::isfinite(expected[k]) ? std::max(amax, std::abs(expected[k])) : amax;
    for (size_t k = r * D; k < (r + 1) * D; ++k)
      n += is_bad(expected[k], out[k], (tol ? (*tol)[k] : tol_out[k]) + 4 * u * (std::abs(expected[k]) + amax)) ||
           (bad_out[k] && !is_bad(ref.out[k], expected[k], tol_out[k]));
  }
  return n;
}

int64_t Subject::bad_lse_against(const std::vector<double>& expected, const std::vector<double>* tol) const {
  int64_t n = 0;
  if (expected.size() != lse.size()) return n_bad_lse;
  const double u = unit_roundoff(c.p.stat_dtype());
  for (size_t k = 0; k < lse.size(); ++k)
    n += is_bad(expected[k], lse[k], (tol ? (*tol)[k] : tol_lse[k]) + 4 * u * std::abs(expected[k])) ||
         (bad_lse[k] && !is_bad(ref.lse[k], expected[k], tol_lse[k]));
  return n;
}

Subject::WeightsFit Subject::weights_fit(const std::vector<double>& expected) const {
  WeightsFit f;
  if (expected.size() != w.size()) return f;
  const double u = c.p.dtype == DType::f64 ? unit_roundoff(DType::f64)
                                           : std::max(unit_roundoff(DType::f32), unit_roundoff(c.p.dtype));
  for (size_t k = 0; k < w.size(); ++k) {
    const bool predicts = is_bad(ref.weights[k], expected[k], tol_w[k]);
    const bool matches = !is_bad(expected[k], w[k], tol_w[k] + 4 * u * std::abs(expected[k]));
    f.explained += bad_w[k] && predicts && matches;
    f.contradicted += !bad_w[k] && predicts;
  }
  return f;
}

ModAt Subject::at(int64_t r, int64_t j) const {
  const Problem& p = c.p;
  const int64_t b = r / (p.Hq * p.Lq), h = r / p.Lq % p.Hq, i = r % p.Lq;
  return ModAt{b, h, i, p.row_keys(b, i).diag, j};
}

double Subject::unmasked_score(int64_t r, int64_t j) const {
  const Problem& p = c.p;
  const int64_t b = r / (p.Hq * p.Lq), h = r / p.Lq % p.Hq, i = r % p.Lq;
  const ModAt at = this->at(r, j);
  double x = logit[static_cast<size_t>(r * p.Lk + j)];
  if (mods.has_logit()) x = mods.logit(at, x);
  if (c.in.bias) x += c.in.bias->get_offset(broadcast_offset(*c.in.bias, b, h, i, j));
  if (!mods.has_score()) return x;
  try {  // a masked key may lie outside what an expression's auxiliary tensors cover
    return mods.score(at, x);
  } catch (const std::invalid_argument&) {
    return std::numeric_limits<double>::quiet_NaN();
  }
}

}  // namespace attncheck::diagnose
