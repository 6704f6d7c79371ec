// The gradient tolerance's error scales (attncheck/grad_scales.hpp), summed from the reference backward's rows in
// the order of its own loops: every sum adds the same terms in the same order for any thread count.
#include "attncheck/grad_scales.hpp"

#include <cmath>

#include "attncheck/rope.hpp"
#include "attncheck/threads.hpp"
#include "grad_scales_pass.hpp"

namespace attncheck {
inline namespace tolerance {

namespace {

// g_ij = P_ij (|dP_ij| + |D_i| + m_ij + M_i) |m'_ij| on visible keys of nonzero weight, 0 elsewhere (grad_scales.hpp).
std::vector<double> ds_scales(const GradLoops& lp, const GradRowTrace& t) {
  const Problem& p = lp.p;
  const int64_t Lk = p.Lk, Dv = p.Dv;
  const double* vb = &lp.v[static_cast<size_t>((t.b * p.Hkv + t.kvh) * Lk * Dv)];
  const double* doi = &lp.dout[static_cast<size_t>(t.row * Dv)];
  std::vector<double> m(static_cast<size_t>(Lk), 0.0), g(static_cast<size_t>(Lk), 0.0);
  double M = 0.0;
  for (int64_t j = 0; j < Lk; ++j) {
    const size_t J = static_cast<size_t>(j);
    if (t.pp[J] == 0.0) continue;  // v_j is never read (it may be poisoned)
    double abs_dot = 0.0;
    for (int64_t d = 0; d < Dv; ++d) abs_dot += std::abs(doi[d] * vb[j * Dv + d]);
    m[J] = t.keep[J] * abs_dot;
    M += t.P[J] * m[J];
  }
  for (size_t J = 0; J < g.size(); ++J)
    if (t.visible[J] && t.P[J] != 0.0)
      g[J] = t.P[J] * (std::abs(t.dP[J]) + std::abs(t.D) + m[J] + M) * std::abs(t.dmod[J]);
  return g;
}

// The largest |m''| / |m'| of the row's score modifications over its visible keys (|m'| floored at 2^-10).
double mod_curvature(const GradLoops& lp, const GradRowTrace& t) {
  const int64_t diag = t.i + lp.p.diagonal_offset(t.b);
  double curv_max = 0;
  for (int64_t j = 0; j < lp.p.Lk; ++j) {
    const size_t J = static_cast<size_t>(j);
    if (!t.visible[J] || !std::isfinite(t.pre[J])) continue;
    const double curv = lp.mods.curvature(ModAt{t.b, t.h, t.i, diag, j}, t.pre[J]);
    if (curv > 0) curv_max = std::max(curv_max, curv / std::max(std::abs(t.dmod[J]), 0x1p-10));
  }
  return curv_max;
}

RopeAt position(const Problem& p, bool query, int64_t row) {
  const int64_t H = query ? p.Hq : p.Hkv, L = query ? p.Lq : p.Lk;
  return query ? rope_query_at(p, row / (H * L), row % L) : rope_key_at(p, row / (H * L), row % L);
}

double angle(const RopeStage& stage, const RopeAt& at, int64_t f) {  // a_f = |position| inv_freq_f (mRoPE: its section)
  return std::abs(static_cast<double>(at.pos[static_cast<size_t>(stage.sections()[size_t(f)])])) *
         stage.inv_freq()[size_t(f)];
}

// Per element of the staged q (query) or k, a_f |x_f|, the angle of its pair f at the row's position times the
// pair's norm: what a relative angle error δ moves the element by, over δ. Empty without RoPE.
std::vector<double> angle_weights(const GradLoops& lp, bool query) {
  const Problem& p = lp.p;
  const std::vector<double>& x = query ? lp.q : lp.k;
  if (!uses_rope(p)) return {};
  std::vector<double> w(x.size(), 0.0);
  for (int64_t row = 0; row < static_cast<int64_t>(x.size()) / p.Dqk; ++row) {
    const RopeAt at = position(p, query, row);
    const double* xr = &x[static_cast<size_t>(row * p.Dqk)];
    double* wr = &w[static_cast<size_t>(row * p.Dqk)];
    for (int64_t f = 0; f < p.rotary_dim / 2; ++f) {
      const auto [a, c] = rope_pair(p, f);
      wr[a] = wr[c] = angle(lp.stage, at, f) * std::hypot(xr[a], xr[c]);
    }
  }
  return w;
}

// The rotation back of the staged gradient g of a row (query or key) with its angles off by δ·a moves pair f by
// m a_f |g_f| per unit δ: added to w (dq_rope, dk_rope).
void add_rotation_back(const GradLoops& lp, bool query, int64_t row, const double* g, double* w) {
  const Problem& p = lp.p;
  const RopeAt at = position(p, query, row);
  const double m = rope_attention_factor(p);
  for (int64_t f = 0; f < p.rotary_dim / 2; ++f) {
    const auto [a, c] = rope_pair(p, f);
    const double e = m * angle(lp.stage, at, f) * std::hypot(g[a], g[c]);
    w[a] += e, w[c] += e;
  }
}

}  // namespace

void GradScalesPass::start(const GradLoops& lp) {
  const Problem& p = lp.p;
  lp_ = &lp;
  s_.dq_abs.assign(static_cast<size_t>(p.B * p.Hq * p.Lq * p.Dqk), 0.0);
  s_.dk_abs.assign(static_cast<size_t>(p.B * p.Hkv * p.Lk * p.Dqk), 0.0);
  if (lp.mods.has_logit()) {  // the sums without the logit stage's derivative (GradScales)
    s_.dq_abs_unchained = s_.dq_abs;
    s_.dk_abs_unchained = s_.dk_abs;
  }
  if (uses_rope(p)) {
    s_.dq_rope = s_.dq_abs;
    s_.dk_rope = s_.dk_abs;
  }
  s_.dv_abs.assign(static_cast<size_t>(p.B * p.Hkv * p.Lk * p.Dv), 0.0);
  if (lp.mods.has_score()) s_.mod_curv.assign(static_cast<size_t>(p.B * p.Hq * p.Lq), 0.0);
  if (lp.in.bias) {
    const std::vector<int64_t> bs = grad_shape(p, 3);
    s_.dbias_abs.assign(static_cast<size_t>(bs[0] * bs[1] * bs[2] * bs[3]), 0.0);
  }
  qa_ = angle_weights(lp, true);
  ka_ = angle_weights(lp, false);
}

// The row's terms of dq_abs, dk_abs, dv_abs (and the unchained and RoPE sums), as the oracle's loops add the
// row's terms of dQ, dK and dV.
void GradScalesPass::row(const GradRowTrace& t) {
  const GradLoops& lp = *lp_;
  const Problem& p = lp.p;
  const int64_t Lk = p.Lk, Dqk = p.Dqk, Dv = p.Dv;
  const double scale = p.effective_scale();
  const std::vector<double> g = ds_scales(lp, t);
  if (!s_.mod_curv.empty()) s_.mod_curv[static_cast<size_t>(t.row)] = mod_curvature(lp, t);
  const size_t q0 = static_cast<size_t>(t.row * Dqk), k0 = static_cast<size_t>((t.b * p.Hkv + t.kvh) * Lk * Dqk);
  const double *qi = &lp.q[q0], *kb = &lp.k[k0], *doi = &lp.dout[static_cast<size_t>(t.row * Dv)];
  double *dq_abs = &s_.dq_abs[q0], *dk_abs = &s_.dk_abs[k0];
  double* dv_abs = &s_.dv_abs[static_cast<size_t>((t.b * p.Hkv + t.kvh) * Lk * Dv)];
  const bool cap = !s_.dq_abs_unchained.empty(), rope = !s_.dq_rope.empty();
  for (int64_t j = 0; j < Lk; ++j) {
    const size_t J = static_cast<size_t>(j);
    if (t.pp[J] != 0.0)
      for (int64_t d = 0; d < Dv; ++d) dv_abs[j * Dv + d] += std::abs(t.pp[J] * doi[d]);
    if (!t.visible[J] || g[J] == 0.0) continue;
    const double ca = std::abs(scale * t.chain[J]) * g[J];
    for (int64_t d = 0; d < Dqk; ++d) {
      dq_abs[d] += std::abs(ca * kb[j * Dqk + d]);
      dk_abs[j * Dqk + d] += std::abs(ca * qi[d]);
    }
    if (rope)  // a key's (query's) rotated element off by δ a_f |x_f| moves dQ (dK) through dS_ij
      for (int64_t d = 0; d < Dqk; ++d) {
        s_.dq_rope[q0 + size_t(d)] += ca * ka_[k0 + size_t(j * Dqk + d)];
        s_.dk_rope[k0 + size_t(j * Dqk + d)] += ca * qa_[q0 + size_t(d)];
      }
    if (cap)  // the same sums with the logit stage's derivative replaced by 1
      for (int64_t d = 0; d < Dqk; ++d) {
        s_.dq_abs_unchained[q0 + size_t(d)] += std::abs(scale * g[J] * kb[j * Dqk + d]);
        s_.dk_abs_unchained[k0 + size_t(j * Dqk + d)] += std::abs(scale * g[J] * qi[d]);
      }
  }
}

// The sums of the staged q and k mapped back like the gradients, through the magnitudes of the stage's Jacobians;
// with RoPE the angle sensitivities first gain the rotation back of the staged gradient r.dq, r.dk.
void GradScalesPass::staged(const BackwardResult& r) {
  const GradLoops& lp = *lp_;
  const Problem& p = lp.p;
  const auto map = [&](bool query, const std::vector<double>& grad, std::vector<double>& abs, std::vector<double>& un,
                       std::vector<double>& angle) {
    parallel_rows(p.B * (query ? p.Hq * p.Lq : p.Hkv * p.Lk), lp.threads, [&](int64_t row) {
      const size_t at = static_cast<size_t>(row * p.Dqk);
      if (!angle.empty()) {
        add_rotation_back(lp, query, row, &grad[at], &angle[at]);
        lp.stage_back(query, row, &angle[at], true);
      }
      lp.stage_back(query, row, &abs[at], true);
      if (!un.empty()) lp.stage_back(query, row, &un[at], true);
    });
  };
  map(true, r.dq, s_.dq_abs, s_.dq_abs_unchained, s_.dq_rope);
  map(false, r.dk, s_.dk_abs, s_.dk_abs_unchained, s_.dk_rope);
}

void GradScalesPass::bias_row(int64_t bias_row, const GradRowTrace& t) {
  const std::vector<int64_t> bs = grad_shape(lp_->p, 3);
  const std::vector<double> g = ds_scales(*lp_, t);
  double* db_abs = &s_.dbias_abs[static_cast<size_t>(bias_row * bs[3])];
  for (size_t J = 0; J < g.size(); ++J) db_abs[bs[3] == 1 ? 0 : J] += g[J];
}

ExpectedGradients expected_gradients(const Problem& p, const Inputs& in, const Tensor& dout, int threads,
                                     bool want_ds) {
  ExpectedGradients e;
  GradScalesPass scales(e);
  static_cast<BackwardResult&>(e) = reference_backward(p, in, dout, threads, want_ds, &scales);
  return e;
}

}  // namespace tolerance
}  // namespace attncheck
