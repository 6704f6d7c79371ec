// The CPU backward (docs/backward.md): `cpu` recomputes the softmax of a head densely and runs the five GEMMs of
// the derivation on Lq x Lk matrices; `cpu-flash` recomputes P = exp(s - lse) from the forward's lse tile by tile,
// takes D = rowsum(dO∘O) from the forward's output, and never stores an Lq x Lk matrix (only 64 x 64 tiles): tasks
// over key blocks accumulate dK, dV; tasks over query blocks accumulate dQ (and dBias); each tile's products are
// GEMMs. Compute type: double for fp64, else float. QK-norm and RoPE are applied to Q and K rows as they are loaded
// (as the forward does), and dQ, dK mapped back through them row by row in fp64 when stored; score modifications
// enter through their derivative (mods.hpp) on each visible key's dS.
#include "cpu_backward.hpp"

#include "attncheck/declarations.hpp"
#include "attncheck/features.hpp"
#include "attncheck/mla.hpp"
#include "cpu_common.hpp"

namespace attncheck::cpu {
namespace {

// K or V rows of one (batch, KV head) with non-finite rows zeroed: such keys are never visible (a GEMM would turn
// their zero weights into 0 * NaN = NaN).
template <class T>
RowMat<T> load_head(const Tensor& t, int64_t b, int64_t h, int64_t r0, int64_t r1) {
  RowMat<T> m(r1 - r0, t.shape[3]);
  load_rows(t, b, h, r0, r1, m.data());
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    if (!m.row(r).allFinite()) m.row(r).setZero();
  return m;
}

// The scores of one query row over keys [j0, j0 + n) from raw dot products, the logit stage's derivative, the score
// modifications' derivative, visibility.
template <class T>
struct RowScores {
  std::vector<T> s, chain, dmod;
  T max = 0;
  void compute(const Scorer<T>& sc, int64_t b, int64_t h, int64_t i, int64_t j0, const T* raw, int64_t n) {
    s.assign(raw, raw + n);
    chain.assign(static_cast<size_t>(n), T(1));
    dmod.resize(static_cast<size_t>(n));
    sc.mod_derivatives(b, h, i, j0, raw, n, sc.span(b, i), dmod.data());
    sc.logit_chain(raw, n, chain.data());
    max = sc.process(b, h, i, j0, s.data(), n, sc.span(b, i));
  }
  // A masked key holds the fill; a visible key whose score is -inf (a -inf bias) has weight 0 either way.
  bool visible(const Scorer<T>& sc, int64_t j) const { return s[static_cast<size_t>(j)] != sc.fill(); }
};

// Whether row (b, h, i) has a visible key with a finite bias (otherwise it is fully masked: no gradient).
bool row_live(const Problem& p, const Inputs& in, const Scorer<double>& sc, int64_t b, int64_t h, int64_t i) {
  const Span sp = sc.span(b, i);
  for (int64_t j = sp.lo; j < sp.hi; ++j) {
    if (!sc.visible_key(b, h, i, ModAt{b, h, i, i + p.diagonal_offset(b), j})) continue;  // mask, mask mods
    if (in.bias && !std::isfinite(in.bias->get_offset(broadcast_offset(*in.bias, b, h, i, j)))) continue;
    return true;
  }
  return false;
}

// A gradient row of the staged q (query) or k, rows r of head h of batch b, mapped back through the position stage
// (QK-norm, RoPE: rope.hpp) in fp64 to the gradient of the input row, and stored.
template <class T>
void store_grad(const RopeStage& stage, bool query, const Tensor& x, Tensor& grad, int64_t b, int64_t h, int64_t r,
                const T* g) {
  const int64_t D = x.shape[3];
  // A row without gradient stays 0 without reading its input (an unseen key may be poisoned).
  if (!stage.on() || std::all_of(g, g + D, [](T v) { return v == T(0); })) return store_row(grad, b, h, r, g);
  std::vector<double> in(static_cast<size_t>(D)), gd(g, g + D);
  load_rows(x, b, h, r, r + 1, in.data());
  query ? stage.query_back(b, r, in.data(), gd.data(), false) : stage.key_back(b, r, in.data(), gd.data(), false);
  store_row(grad, b, h, r, gd.data());
}

template <class T>
T keep_factor(const uint8_t* keep, int64_t j, T ks) {
  return keep ? (keep[j] ? ks : T(0)) : T(1);
}

// dBias accumulates in double in the bias's shape; written once, rounded to bias_dtype.
void store_dbias(const std::vector<double>& acc, Gradients& g) {
  for (size_t n = 0; n < acc.size(); ++n) g.dbias->set_offset(static_cast<int64_t>(n), acc[n]);
}

template <class T>
void dense_backward(const Problem& p, const Inputs& in, const Tensor& dout, Gradients& g) {
  const Scorer<T> sc(p, in);
  const RopeStage stage(p);
  const T scale = static_cast<T>(p.effective_scale()), ks = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  const int64_t G = p.group_size(), Lq = p.Lq, Lk = p.Lk;
  std::vector<double> dbias(g.dbias ? static_cast<size_t>(g.dbias->numel()) : 0, 0.0);
  // Units write dBias entries other units may share when the bias broadcasts over batch or heads: run in order.
  const bool shared_bias = p.bias_shape && ((*p.bias_shape)[0] == 1 || (*p.bias_shape)[1] == 1);
  parallel_tasks(p.B * p.Hkv, shared_bias ? 1 : cpu_threads(), [&](int64_t unit, int) {
    const int64_t b = unit / p.Hkv, kvh = unit % p.Hkv;
    RowMat<T> K = load_head<T>(in.k, b, kvh, 0, Lk);
    const RowMat<T> V = load_head<T>(in.v, b, kvh, 0, Lk);
    rotate_rows(stage, false, b, 0, Lk, p.Dqk, K.data());  // QK-norm and RoPE as the forward (no-op without)
    RowMat<T> dK = RowMat<T>::Zero(Lk, p.Dqk), dV = RowMat<T>::Zero(Lk, p.Dv);
    RowScores<T> rs;
    for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
      RowMat<T> Q(Lq, p.Dqk), dO(Lq, p.Dv);
      load_rows(in.q, b, h, 0, Lq, Q.data());
      rotate_rows(stage, true, b, 0, Lq, p.Dqk, Q.data());
      load_rows(dout, b, h, 0, Lq, dO.data());
      const RowMat<T> S = Q * K.transpose();  // raw dot products
      RowMat<T> P = RowMat<T>::Zero(Lq, Lk), Pk = P, dS = P, dR = P;
      const RowMat<T> dPk = dO * V.transpose();  // dP'_ij = dO_i · v_j
      for (int64_t i = 0; i < Lq; ++i) {
        rs.compute(sc, b, h, i, 0, S.row(i).data(), Lk);
        if (rs.max == -std::numeric_limits<T>::infinity()) continue;  // fully masked: no gradient
        const T m = sc.finite_fill() ? std::max(rs.max, sc.fill()) : rs.max;
        T sum = 0;
        for (int64_t j = 0; j < Lk; ++j) sum += P(i, j) = exp0(rs.s[static_cast<size_t>(j)] - m);
        P.row(i) /= sum;
        const uint8_t* keep = keep_row(p, in, b, h, i, 0);
        T D = 0;
        for (int64_t j = 0; j < Lk; ++j) {
          const T kf = keep_factor(keep, j, ks);
          Pk(i, j) = P(i, j) * kf;
          // A key of weight 0 is never read: its dP' may be inf (finite poison of V, dO·v overflowing), and 0·inf.
          if (Pk(i, j) != T(0)) D += Pk(i, j) * dPk(i, j);
        }
        for (int64_t j = 0; j < Lk; ++j) {
          if (!rs.visible(sc, j) || P(i, j) == T(0)) continue;
          dS(i, j) = P(i, j) * (keep_factor(keep, j, ks) * dPk(i, j) - D) * rs.dmod[static_cast<size_t>(j)];
          dR(i, j) = dS(i, j) * rs.chain[static_cast<size_t>(j)];
        }
        if (g.dbias)
          for (int64_t j = 0; j < Lk; ++j)
            dbias[static_cast<size_t>(broadcast_offset(*g.dbias, b, h, i, j))] += dS(i, j);
      }
      dV.noalias() += Pk.transpose() * dO;
      dK.noalias() += scale * (dR.transpose() * Q);
      const RowMat<T> dQ = scale * (dR * K);
      for (int64_t i = 0; i < Lq; ++i) store_grad(stage, true, in.q, g.dq, b, h, i, dQ.row(i).data());
    }
    for (int64_t j = 0; j < Lk; ++j) {
      store_grad(stage, false, in.k, g.dk, b, kvh, j, dK.row(j).data());
      store_row(g.dv, b, kvh, j, dV.row(j).data());
    }
  });
  if (g.dbias) store_dbias(dbias, g);
}

// A row-major block for the SIMD GEMM (simd.hpp): the row stride is whole strips of W columns, the padding zero,
// so a block is a gemm() B operand as it stands (bstride = W, ldb = ld) and a C operand (ldc = ld).
template <class T>
struct Block {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<T> a;
  void reset(int64_t r, int64_t c) {
    const int64_t W = simd::strip_width<T>();
    rows = r, cols = c, ld = (c + W - 1) / W * W;
    a.assign(static_cast<size_t>(r * ld), T(0));
  }
  T* row(int64_t r) { return a.data() + r * ld; }
  const T* row(int64_t r) const { return a.data() + r * ld; }
  T& operator()(int64_t r, int64_t c) { return a[static_cast<size_t>(r * ld + c)]; }
  // Rows [r0, r1) of head h of batch b of t; with zero_bad, rows holding a non-finite value become zero (keys that
  // are never visible: a GEMM would turn their zero weights into 0 · NaN = NaN).
  void load(const Tensor& t, int64_t b, int64_t h, int64_t r0, int64_t r1, bool zero_bad) {
    const int64_t D = t.shape[3];
    reset(r1 - r0, D);
    std::vector<T> tmp(static_cast<size_t>((r1 - r0) * D));
    load_rows(t, b, h, r0, r1, tmp.data());
    for (int64_t r = 0; r < rows; ++r) {
      const T* src = tmp.data() + r * D;
      bool finite = true;
      for (int64_t d = 0; d < D; ++d) finite = finite && std::isfinite(src[d]);
      if (finite || !zero_bad) std::copy(src, src + D, row(r));
    }
  }
  // This block's transpose into t.
  void transpose_into(Block& t) const {
    t.reset(cols, rows);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) t(c, r) = a[static_cast<size_t>(r * ld + c)];
  }
};

// C (+)= A · B for a row-major A of B.rows columns (row stride lda) and m rows.
template <class T>
void gemm(int64_t m, const T* A, int64_t lda, const Block<T>& B, Block<T>& C, bool accumulate) {
  simd::gemm<T>(m, B.cols, B.rows, A, lda, B.a.data(), simd::strip_width<T>(), B.ld, C.a.data(), C.ld, accumulate);
}

// cpu-flash: per-row lse (the forward's), D = dO·O (the forward's O) and liveness, then the two tiled passes. The
// tiles' products run on the dispatched SIMD GEMM (the forward's), scale applied once to dK and dQ when stored.
template <class T>
void flash_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout, Gradients& g) {
  if (!fwd.lse) throw std::invalid_argument("cpu-flash backward: the forward's lse is missing (run it with want_lse)");
  simd::select_target();
  const Scorer<T> sc(p, in);
  const Scorer<double> scd(p, in);
  const RopeStage stage(p);
  const T scale = static_cast<T>(p.effective_scale()), ks = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  const int64_t G = p.group_size(), Lq = p.Lq, Lk = p.Lk, rows = p.B * p.Hq * Lq;
  std::vector<T> lse(static_cast<size_t>(rows)), D(static_cast<size_t>(rows));
  std::vector<char> live(static_cast<size_t>(rows));
  parallel_tasks(p.B * p.Hq, cpu_threads(), [&](int64_t bh, int) {
    const int64_t b = bh / p.Hq, h = bh % p.Hq;
    RowMat<T> O(Lq, p.Dv), dO(Lq, p.Dv);
    load_rows(fwd.out, b, h, 0, Lq, O.data());
    load_rows(dout, b, h, 0, Lq, dO.data());
    for (int64_t i = 0; i < Lq; ++i) {
      const size_t row = static_cast<size_t>(bh * Lq + i);
      live[row] = row_live(p, in, scd, b, h, i);
      lse[row] = static_cast<T>(fwd.lse->get_offset(static_cast<int64_t>(row)));
      D[row] = live[row] ? O.row(i).dot(dO.row(i)) : T(0);  // D_i = rowsum(dO ∘ O)
    }
  });

  // One query row against keys [j0, j0 + n), from its raw dot products q·k_j and dP'_ij = dO_i·v_j (GEMM rows):
  // weights P' (into pk), dS (into ds) and dR = dS · logit' (into dr).
  auto row_grad = [&](RowScores<T>& rs, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, const T* raw,
                      const T* dpk, T* pk, T* ds, T* dr) {
    const size_t row = static_cast<size_t>((b * p.Hq + h) * Lq + i);
    rs.compute(sc, b, h, i, j0, raw, n);
    const uint8_t* keep = keep_row(p, in, b, h, i, j0);
    exp_shifted(rs.s.data(), pk, n, lse[row]);  // P: 0 where masked (-inf), exp(fill - lse) under a finite fill
    for (int64_t j = 0; j < n; ++j) {
      const bool vis = rs.visible(sc, j);
      const T P = pk[j], kf = keep_factor(keep, j, ks);
      pk[j] = P * kf;
      ds[j] = dr[j] = 0;
      if (!vis || P == T(0)) continue;  // never read: dpk may be inf (a huge value of an unseen key)
      const T dp = kf == T(0) ? T(0) : kf * dpk[j];
      ds[j] = P * (dp - D[row]) * rs.dmod[static_cast<size_t>(j)];
      dr[j] = ds[j] * rs.chain[static_cast<size_t>(j)];
    }
  };
  // Scratch of one task: the tile's raw scores S = Q·Kᵀ, dP' = dO·Vᵀ, P', dS, dR (m x n), and transposes.
  struct Tile {
    Block<T> S, dPk, PK, DS, DR, T1;
    RowScores<T> rs;
  };
  // Rows of the query block that are live get P', dS and dR; returns whether any row is live.
  auto tile = [&](Tile& w, int64_t b, int64_t h, int64_t i0, int64_t j0, const Block<T>& Qb, const Block<T>& dOb,
                  const Block<T>& KbT, const Block<T>& VbT) {
    const int64_t m = Qb.rows, n = KbT.cols;
    for (Block<T>* x : {&w.S, &w.dPk, &w.PK, &w.DS, &w.DR}) x->reset(m, n);
    gemm(m, Qb.a.data(), Qb.ld, KbT, w.S, false);
    gemm(m, dOb.a.data(), dOb.ld, VbT, w.dPk, false);
    bool any = false;
    for (int64_t i = 0; i < m; ++i) {
      if (!live[static_cast<size_t>((b * p.Hq + h) * Lq + i0 + i)]) continue;
      any = true;
      row_grad(w.rs, b, h, i0 + i, j0, n, w.S.row(i), w.dPk.row(i), w.PK.row(i), w.DS.row(i), w.DR.row(i));
    }
    return any;
  };
  auto store_scaled = [&](bool query, Tensor& t, int64_t b, int64_t h, int64_t r0, Block<T>& X) {
    for (int64_t r = 0; r < X.rows; ++r) {
      for (int64_t c = 0; c < X.cols; ++c) X(r, c) *= scale;
      store_grad(stage, query, query ? in.q : in.k, t, b, h, r0 + r, X.row(r));
    }
  };
  // Q or K rows [r0, r0 + X.rows) just loaded, through QK-norm and RoPE as the forward reads them.
  auto stage_rows = [&](bool query, int64_t b, int64_t r0, Block<T>& X) {
    for (int64_t r = 0; r < X.rows; ++r) rotate_rows(stage, query, b, r0 + r, r0 + r + 1, X.cols, X.row(r));
  };

  // Pass 1: dK, dV, one task per (batch, KV head, key block), summing over the group's query heads (GQA), query
  // block by query block: dV += P'ᵀ·dO and dK += dRᵀ·Q.
  const int64_t nkb = (Lk + kBwdBlockK - 1) / kBwdBlockK;
  parallel_tasks(p.B * p.Hkv * nkb, cpu_threads(), [&](int64_t task, int) {
    const int64_t b = task / (p.Hkv * nkb), kvh = (task / nkb) % p.Hkv, j0 = (task % nkb) * kBwdBlockK;
    const int64_t n = std::min(kBwdBlockK, Lk - j0);
    Block<T> Kb, Vb, KbT, VbT, Qb, dOb, dK, dV;
    Kb.load(in.k, b, kvh, j0, j0 + n, true);
    stage_rows(false, b, j0, Kb);
    Vb.load(in.v, b, kvh, j0, j0 + n, true);
    Kb.transpose_into(KbT);
    Vb.transpose_into(VbT);
    dK.reset(n, p.Dqk);
    dV.reset(n, p.Dv);
    Tile w;
    for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h)
      for (int64_t i0 = 0; i0 < Lq; i0 += kBwdBlockQ) {
        const int64_t m = std::min(kBwdBlockQ, Lq - i0);
        Qb.load(in.q, b, h, i0, i0 + m, false);
        stage_rows(true, b, i0, Qb);
        dOb.load(dout, b, h, i0, i0 + m, false);
        if (!tile(w, b, h, i0, j0, Qb, dOb, KbT, VbT)) continue;
        w.PK.transpose_into(w.T1);
        gemm(n, w.T1.a.data(), w.T1.ld, dOb, dV, true);
        w.DR.transpose_into(w.T1);
        gemm(n, w.T1.a.data(), w.T1.ld, Qb, dK, true);
      }
    store_scaled(false, g.dk, b, kvh, j0, dK);
    for (int64_t j = 0; j < n; ++j) store_row(g.dv, b, kvh, j0 + j, dV.row(j));
  });

  // Pass 2: dQ (and dBias), one task per (batch, query head, query block), key block by key block: dQ += dR·K.
  // With a bias one task per head, so that rows broadcast onto one dBias row (bias dim 2 == 1) are summed by one
  // task.
  const int64_t bq = g.dbias ? Lq : kBwdBlockQ, nqb = (Lq + bq - 1) / bq;
  std::vector<double> dbias(g.dbias ? static_cast<size_t>(g.dbias->numel()) : 0, 0.0);
  parallel_tasks(p.B * p.Hq * nqb, cpu_threads(), [&](int64_t task, int) {
    const int64_t b = task / (p.Hq * nqb), h = (task / nqb) % p.Hq, i0 = (task % nqb) * bq;
    const int64_t m = std::min(Lq, i0 + bq) - i0, kvh = p.kv_head(h);
    Block<T> Qb, dOb, Kb, Vb, KbT, VbT, dQ;
    Qb.load(in.q, b, h, i0, i0 + m, false);
    stage_rows(true, b, i0, Qb);
    dOb.load(dout, b, h, i0, i0 + m, false);
    dQ.reset(m, p.Dqk);
    Tile w;
    for (int64_t j0 = 0; j0 < Lk; j0 += kBwdBlockK) {
      const int64_t n = std::min(kBwdBlockK, Lk - j0);
      Kb.load(in.k, b, kvh, j0, j0 + n, true);
      stage_rows(false, b, j0, Kb);
      Vb.load(in.v, b, kvh, j0, j0 + n, true);
      Kb.transpose_into(KbT);
      Vb.transpose_into(VbT);
      if (!tile(w, b, h, i0, j0, Qb, dOb, KbT, VbT)) continue;
      if (g.dbias)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            dbias[static_cast<size_t>(broadcast_offset(*g.dbias, b, h, i0 + i, j0 + j))] += w.DS(i, j);
      gemm(m, w.DR.a.data(), w.DR.ld, Kb, dQ, true);
    }
    store_scaled(true, g.dq, b, h, i0, dQ);
  });
  if (g.dbias) store_dbias(dbias, g);
}

class WithBackward final : public Impl {
 public:
  WithBackward(ImplPtr fwd, BackwardAlgo algo) : f_(std::move(fwd)), algo_(algo) {}
  std::string name() const override { return f_->name(); }
  std::string description() const override { return f_->description(); }
  Support available() const override { return f_->available(); }
  Capabilities capabilities() const override { return f_->capabilities(); }
  Support supports(const Problem& p) const override { return f_->supports(p); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override { f_->run(p, in, out); }
  Declarations declarations() const override { return f_->declarations(); }
  Support supports_merge(const MergeProblem& p) const override { return f_->supports_merge(p); }
  void run_merge(const MergeProblem& p, const StoredStates& in, StoredStates& out) const override {
    f_->run_merge(p, in, out);
  }
  Support supports_partials(const Problem& p) const override { return f_->supports_partials(p); }
  void run_partials(const Problem& p, const Inputs& in, int64_t n, KernelPartials& k) const override {
    f_->run_partials(p, in, n, k);
  }

  Support supports_backward(const Problem& p) const override {
    if (Support s = f_->supports(p); !s.ok) return s;
    if (Support s = backward_modelled(p); !s.ok) return s;  // sinks, append, varlen, pages, fp8
    if (algo_ == BackwardAlgo::flash && p.bias_shape &&
        (((*p.bias_shape)[0] == 1 && p.B > 1) || ((*p.bias_shape)[1] == 1 && p.Hq > 1)))
      return Support::no("dBias of a bias broadcast over batch or heads not supported by cpu-flash backward");
    return Support::yes();
  }
  void run_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout,
                    Gradients& g) const override {
    const bool f64 = p.dtype == DType::f64;
    if (algo_ == BackwardAlgo::dense)
      f64 ? dense_backward<double>(p, in, dout, g) : dense_backward<float>(p, in, dout, g);
    else
      f64 ? flash_backward<double>(p, in, fwd, dout, g) : flash_backward<float>(p, in, fwd, dout, g);
    fold_latent_gradient(p, g.dk, g.dv);  // absorbed MLA: the two roles' gradients into the one latent cache
  }

 private:
  ImplPtr f_;
  BackwardAlgo algo_;
};

}  // namespace

ImplPtr with_backward(ImplPtr fwd, BackwardAlgo algo) { return std::make_shared<WithBackward>(std::move(fwd), algo); }

}  // namespace attncheck::cpu
