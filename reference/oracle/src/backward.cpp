// The looped reference backward: for each query row, recompute the scores and softmax of the forward, then
// dP = dO·Vᵀ (through the keep-mask), D = Σ_j P'·dP', dS = P∘(dP − D), the logit stage's chain rule, and accumulate
// dQ = scale·dS·K, dK = scale·dSᵀ·Q, dV = P'ᵀ·dO, dBias = Σ dS over broadcast dims (derivation: docs/backward.md).
#include "attncheck/backward.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "attncheck/block_mask.hpp"
#include "attncheck/features.hpp"
#include "attncheck/grad_trace.hpp"
#include "attncheck/mla.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/rope.hpp"
#include "attncheck/reference.hpp"

namespace attncheck {
inline namespace oracle {

namespace {

// The forward's scores of one row, and the derivatives of the stages between scale·q·k and the softmax.
struct RowScores {
  std::vector<double> s;      // the score the softmax reads (the fill where masked)
  std::vector<double> pre;    // the score the score modifications read (after the logit stage and bias)
  std::vector<double> chain;  // d logit stage / d (scale·q·k)
  std::vector<double> dmod;   // d (score modifications) / d (score after the logit stage and bias)
  double max = 0;
};

// Everything the backward of one (b, h, i) row needs, recomputed from the problem.
struct RowGrad {
  bool fully_masked = false;
  double lse = 0, d = 0;
  std::vector<char> vis;     // key visible (its score depends on q, k, bias)
  std::vector<double> P;     // P_ij: the softmax weights
  std::vector<double> keep;  // keep_ij/(1-p): 0 dropped, 1 without dropout
  std::vector<double> pp;    // P'_ij = P_ij keep_ij/(1-p): the weight that multiplies v_j in the forward
  std::vector<double> dP;    // dP'_ij = keep_ij/(1-p) dO_i·v_j, where P'_ij != 0
  std::vector<double> ds;    // dS_ij: gradient of the score after the logit stage and bias (what the bias receives)
  std::vector<double>
      dr;        // dS_ij * the logit stage's derivative: gradient of scale·q·k (what q and k receive, / scale)
  RowScores sc;  // the scores; sc.chain: the logit stage's derivative c_ij (1 without one)
};

class Backward {
 public:
  // q and k pass through the position stage (QK-norm, RoPE) as in the forward; the rows below work on the staged
  // vectors, and the gradients are mapped back through the stage (GradLoops::stage_back).
  Backward(const Problem& p, const Inputs& in, const Tensor& dout)
      : p_(p),
        in_(in),
        mods_(p),
        dense_(p, in),
        stage_(p),
        q_in_(in.q.to_double()),
        k_in_(in.k.to_double()),
        q_(staged(q_in_, true)),
        k_(staged(k_in_, false)),
        v_(in.v.to_double()),
        do_(dout.to_double()) {}

  GradLoops loops(int threads) const { return {p_, in_, mods_, stage_, q_in_, k_in_, q_, k_, v_, do_, threads}; }

  // Forward, step 1: the scores of row (b, h, i) as reference.cpp computes them (masked keys take the fill and are
  // never read), with the derivative of each stage after the dot product.
  void scores(int64_t b, int64_t h, int64_t i, std::vector<char>& vis, RowScores& rs) const {
    const Problem& p = p_;
    const int64_t Lk = p.Lk, Dqk = p.Dqk;
    const double inf = std::numeric_limits<double>::infinity();
    const double scale = p.effective_scale();
    const double* qi = &q_[static_cast<size_t>(((b * p.Hq + h) * p.Lq + i) * Dqk)];
    const double* kb = &k_[static_cast<size_t>((b * p.Hkv + p.kv_head(h)) * Lk * Dqk)];
    const int64_t diag = i + p.diagonal_offset(b);
    vis.assign(static_cast<size_t>(Lk), 0);
    dense_.row(b, h, i, vis.data());  // every mask composed, the mask modifications included (block_mask.hpp)
    rs.s.assign(static_cast<size_t>(Lk), p.fill == MaskFill::neg_inf ? -inf : p.fill_value);
    rs.pre = rs.s;
    rs.chain.assign(static_cast<size_t>(Lk), 1.0);
    rs.dmod.assign(static_cast<size_t>(Lk), 1.0);
    rs.max = -inf;
    for (int64_t j = 0; j < Lk; ++j) {
      const size_t J = static_cast<size_t>(j);
      if (!vis[J]) continue;
      double dot = 0.0;
      for (int64_t d = 0; d < Dqk; ++d) dot += qi[d] * kb[j * Dqk + d];
      double score = dot * scale;
      if (mods_.has_logit()) {  // the logit stage (mods_library.cpp) and its derivative, before the bias
        const ModAt at{b, h, i, diag, j};
        rs.chain[J] = mods_.logit_derivative(at, score);
        score = mods_.logit(at, score);
      }
      if (in_.bias) score += in_.bias->get_offset(broadcast_offset(*in_.bias, b, h, i, j));
      rs.pre[J] = score;
      if (mods_.has_score()) {  // score modifications, after the bias: dS_pre = dS_post · m'(score)
        const ModAt at{b, h, i, diag, j};
        const double modified = mods_.score(at, score);
        if (std::isfinite(score) && !std::isfinite(modified)) mods_.expect_finite(at, score);  // throws
        if (std::isfinite(score)) rs.dmod[J] = mods_.derivative(at, score);
        score = modified;
      }
      rs.s[J] = score;
      rs.max = std::max(rs.max, score);
    }
  }

  void row(int64_t b, int64_t h, int64_t i, RowGrad& r) const {
    const Problem& p = p_;
    const int64_t Lk = p.Lk, Dv = p.Dv;
    const double inf = std::numeric_limits<double>::infinity();
    const int64_t row = (b * p.Hq + h) * p.Lq + i;
    const double* vb = &v_[static_cast<size_t>((b * p.Hkv + p.kv_head(h)) * Lk * Dv)];
    const double* doi = &do_[static_cast<size_t>(row * Dv)];
    const RowScores& rs = r.sc;
    scores(b, h, i, r.vis, r.sc);
    r.P.assign(static_cast<size_t>(Lk), 0.0);
    r.keep.assign(static_cast<size_t>(Lk), 1.0);
    r.pp.assign(static_cast<size_t>(Lk), 0.0);
    r.dP.assign(static_cast<size_t>(Lk), 0.0);
    r.ds.assign(static_cast<size_t>(Lk), 0.0);
    r.dr.assign(static_cast<size_t>(Lk), 0.0);
    const std::vector<double>& s = rs.s;
    std::vector<double>& P = r.P;
    double m = rs.max;
    // Forward, step 2: the softmax. A row with no visible key (or only -inf scores) has no gradient.
    r.fully_masked = m == -inf;
    if (r.fully_masked) {
      r.lse = p.fill == MaskFill::finite ? p.fill_value + std::log(static_cast<double>(Lk)) : -inf;
      r.d = 0;
      return;
    }
    if (p.fill == MaskFill::finite) m = std::max(m, p.fill_value);
    double sum = 0.0;
    for (int64_t j = 0; j < Lk; ++j) {
      const bool takes_part = r.vis[static_cast<size_t>(j)] || p.fill == MaskFill::finite;
      P[static_cast<size_t>(j)] = takes_part ? std::exp(s[static_cast<size_t>(j)] - m) : 0.0;
      sum += P[static_cast<size_t>(j)];
    }
    for (double& x : P) x /= sum;
    r.lse = m + std::log(sum);

    // Backward: dP_ij = keep_ij/(1-p) · dO_i·v_j (the same keep-mask as the forward), only where P'_ij != 0.
    const double keep_scale = 1.0 / (1.0 - p.dropout_p);
    double D = 0.0;
    for (int64_t j = 0; j < Lk; ++j) {
      const size_t J = static_cast<size_t>(j);
      if (in_.keep) r.keep[J] = in_.keep->get_offset(((b * p.Hq + h) * p.Lq + i) * Lk + j) != 0 ? keep_scale : 0.0;
      r.pp[J] = P[J] * r.keep[J];
      if (r.pp[J] == 0.0) continue;  // a dropped or zero weight: v_j is never read (it may be poisoned)
      double dot = 0.0;
      for (int64_t d = 0; d < Dv; ++d) dot += doi[d] * vb[j * Dv + d];
      r.dP[J] = r.keep[J] * dot;
      D += P[J] * r.dP[J];  // D_i = Σ_j P_ij dP_ij = Σ_j P'_ij dP'_ij
    }
    r.d = D;
    // dS_ij = P_ij (dP_ij − D_i) · m'_ij on visible keys; a masked key's score is the constant fill: no gradient.
    for (int64_t j = 0; j < Lk; ++j) {
      const size_t J = static_cast<size_t>(j);
      if (!r.vis[J] || P[J] == 0.0) continue;
      r.ds[J] = P[J] * (r.dP[J] - D) * rs.dmod[J];
      r.dr[J] = r.ds[J] * rs.chain[J];
    }
  }

  GradRowTrace trace(int64_t b, int64_t h, int64_t i, const RowGrad& g) const {
    return {(b * p_.Hq + h) * p_.Lq + i,
            b,
            h,
            i,
            p_.kv_head(h),
            g.vis,
            g.sc.pre,
            g.sc.chain,
            g.sc.dmod,
            g.P,
            g.keep,
            g.pp,
            g.dP,
            g.d};
  }

 private:
  std::vector<double> staged(std::vector<double> x, bool query) const {  // the forward's widen (reference.cpp)
    if (!stage_.on()) return x;
    const int64_t H = query ? p_.Hq : p_.Hkv, L = query ? p_.Lq : p_.Lk;
    for (int64_t row = 0; row < p_.B * H * L; ++row) {
      double* xr = &x[static_cast<size_t>(row * p_.Dqk)];
      query ? stage_.query(row / (H * L), row % L, xr) : stage_.key(row / (H * L), row % L, xr);
    }
    return x;
  }

  const Problem& p_;
  const Inputs& in_;
  const ModSet mods_;
  const DenseMask dense_;
  const RopeStage stage_;
  std::vector<double> q_in_, k_in_, q_, k_, v_, do_;
};

void check_dout(const Problem& p, const Tensor& dout) {
  const std::vector<int64_t> want = {p.B, p.Hq, p.Lq, p.Dv};
  if (dout.shape != want) {
    std::string got;
    for (int64_t x : dout.shape) {
      if (!got.empty()) got += ',';
      got += std::to_string(x);  // not "," + to_string(): gcc 12's false -Wrestrict (GCC PR 105329)
    }
    throw std::invalid_argument("dout: shape [" + got + "] does not match [B,Hq,Lq,Dv] = [" + std::to_string(p.B) +
                                "," + std::to_string(p.Hq) + "," + std::to_string(p.Lq) + "," + std::to_string(p.Dv) +
                                "]");
  }
  if (dout.dtype == DType::u8) throw std::invalid_argument("dout: dtype u8 is not a floating type");
}

// Phase 1, one task per (batch, KV head): it owns dK and dV of that head, summed over the group's query heads
// (GQA) and their queries in a fixed order; dQ rows are written by the one task that computes them. dQ and dK are
// those of the staged q and k.
void row_gradients(const Backward& bw, const GradLoops& lp, BackwardResult& r, bool want_ds, GradObserver* observer) {
  const Problem& p = lp.p;
  const int64_t Hq = p.Hq, Hkv = p.Hkv, Lq = p.Lq, Lk = p.Lk, Dqk = p.Dqk, Dv = p.Dv, G = p.group_size();
  const double scale = p.effective_scale();
  parallel_rows(p.B * Hkv, lp.threads, [&](int64_t unit) {
    const int64_t b = unit / Hkv, kvh = unit % Hkv;
    const double* kb = &lp.k[static_cast<size_t>((b * Hkv + kvh) * Lk * Dqk)];
    double* dk = &r.dk[static_cast<size_t>((b * Hkv + kvh) * Lk * Dqk)];
    double* dv = &r.dv[static_cast<size_t>((b * Hkv + kvh) * Lk * Dv)];
    RowGrad g;
    for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        bw.row(b, h, i, g);
        const int64_t row = (b * Hq + h) * Lq + i;
        r.d[static_cast<size_t>(row)] = g.d;
        r.lse[static_cast<size_t>(row)] = g.lse;
        if (g.fully_masked) continue;
        if (want_ds) std::copy(g.ds.begin(), g.ds.end(), r.ds.begin() + row * Lk);
        const double* qi = &lp.q[static_cast<size_t>(row * Dqk)];
        const double* doi = &lp.dout[static_cast<size_t>(row * Dv)];
        double* dq = &r.dq[static_cast<size_t>(row * Dqk)];
        for (int64_t j = 0; j < Lk; ++j) {
          const size_t J = static_cast<size_t>(j);
          if (g.pp[J] != 0.0)
            for (int64_t d = 0; d < Dv; ++d) dv[j * Dv + d] += g.pp[J] * doi[d];  // dV_j += P'_ij dO_i
          if (g.dr[J] == 0.0) continue;  // no score gradient: k_j (masked, perhaps poisoned) is never read
          const double c = scale * g.dr[J];
          for (int64_t d = 0; d < Dqk; ++d) {
            dq[d] += c * kb[j * Dqk + d];  // dQ_i = scale Σ_j dS_ij c_ij k_j
            dk[j * Dqk + d] += c * qi[d];  // dK_j = scale Σ_i dS_ij c_ij q_i
          }
        }
        if (observer) observer->row(bw.trace(b, h, i, g));
      }
  });
}

// dQ and dK of the staged q and k mapped back to the q and k as given: the transposed Jacobians of RoPE and
// QK-norm.
void position_stage_back(const GradLoops& lp, BackwardResult& r) {
  const Problem& p = lp.p;
  parallel_rows(p.B * p.Hq * p.Lq, lp.threads,
                [&](int64_t row) { lp.stage_back(true, row, &r.dq[static_cast<size_t>(row * p.Dqk)], false); });
  parallel_rows(p.B * p.Hkv * p.Lk, lp.threads,
                [&](int64_t row) { lp.stage_back(false, row, &r.dk[static_cast<size_t>(row * p.Dqk)], false); });
}

// Phase 2, dBias: one task per row (b', h', i') of the bias tensor sums dS over every (b, h, i) that reads it.
void bias_gradient(const Backward& bw, const GradLoops& lp, BackwardResult& r, GradObserver* observer) {
  const Problem& p = lp.p;
  const std::vector<int64_t> bs = grad_shape(p, 3);
  r.dbias.assign(static_cast<size_t>(bs[0] * bs[1] * bs[2] * bs[3]), 0.0);
  parallel_rows(bs[0] * bs[1] * bs[2], lp.threads, [&](int64_t brow) {
    const int64_t bb = brow / (bs[1] * bs[2]), hh = (brow / bs[2]) % bs[1], ii = brow % bs[2];
    double* db = &r.dbias[static_cast<size_t>(brow * bs[3])];
    RowGrad g;
    for (int64_t b = (bs[0] == 1 ? 0 : bb); b < (bs[0] == 1 ? p.B : bb + 1); ++b)
      for (int64_t h = (bs[1] == 1 ? 0 : hh); h < (bs[1] == 1 ? p.Hq : hh + 1); ++h)
        for (int64_t i = (bs[2] == 1 ? 0 : ii); i < (bs[2] == 1 ? p.Lq : ii + 1); ++i) {
          bw.row(b, h, i, g);
          if (g.fully_masked) continue;
          for (int64_t j = 0; j < p.Lk; ++j) db[bs[3] == 1 ? 0 : j] += g.ds[static_cast<size_t>(j)];
          if (observer) observer->bias_row(brow, bw.trace(b, h, i, g));
        }
  });
}

}  // namespace

std::vector<int64_t> grad_shape(const Problem& p, int which) {
  switch (which) {
    case 0: return {p.B, p.Hq, p.Lq, p.Dqk};
    case 1: return {p.B, p.Hkv, p.Lk, p.Dqk};
    case 2: return {p.B, p.Hkv, p.Lk, p.Dv};
    default:
      if (!p.bias_shape) return {};
      return {(*p.bias_shape)[0], (*p.bias_shape)[1], (*p.bias_shape)[2], (*p.bias_shape)[3]};
  }
}

Gradients make_gradients(const Problem& p) {
  Gradients g{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), std::nullopt};
  if (p.bias_shape) g.dbias = Tensor(p.bias_dtype, grad_shape(p, 3));
  return g;
}

Tensor make_dout(const Problem& p) { return Tensor(p.dtype, {p.B, p.Hq, p.Lq, p.Dv}, storage_order(p.layout)); }

BackwardResult reference_backward(const Problem& p, const Inputs& in, const Tensor& dout, int threads, bool want_ds,
                                  GradObserver* observer) {
  validate(p, in);
  check_dout(p, dout);
  // Features the gradients below do not model (the feature table's backward_gap): sinks (no sink term, no
  // gradient of the sink logits), KV-cache append (the past has no gradient path here), packed sequences (the
  // masks are the unpacked ones), a paged cache (a shared page's gradient would sum over sequences), fp8 (its
  // gradients need their own scales, cuDNN's sdpa_fp8_backward).
  if (Support s = backward_modelled(p); !s.ok) throw std::invalid_argument("reference_backward: " + s.reason);
  const Backward bw(p, in, dout);
  const GradLoops lp = bw.loops(threads);
  if (observer) observer->start(lp);

  BackwardResult r;
  r.dq.assign(static_cast<size_t>(p.B * p.Hq * p.Lq * p.Dqk), 0.0);
  r.dk.assign(static_cast<size_t>(p.B * p.Hkv * p.Lk * p.Dqk), 0.0);
  r.dv.assign(static_cast<size_t>(p.B * p.Hkv * p.Lk * p.Dv), 0.0);
  r.d.assign(static_cast<size_t>(p.B * p.Hq * p.Lq), 0.0);
  r.lse = r.d;
  if (want_ds) r.ds.assign(static_cast<size_t>(p.B * p.Hq * p.Lq * p.Lk), 0.0);
  row_gradients(bw, lp, r, want_ds, observer);
  if (uses_position_stage(p)) {
    if (observer) observer->staged(r);
    position_stage_back(lp, r);
  }
  if (in.bias) bias_gradient(bw, lp, r, observer);
  fold_latent_gradient(p, r.dk, r.dv);  // absorbed MLA: one latent cache, one gradient
  return r;
}

}  // namespace oracle
}  // namespace attncheck
