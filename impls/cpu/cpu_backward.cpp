// The CPU backward (docs/backward.md): `cpu` recomputes the softmax of a head densely and runs the five GEMMs of
// the derivation on Lq x Lk matrices; `cpu-flash` recomputes P = exp(s - lse) from the forward's lse tile by tile,
// takes D = rowsum(dO∘O) from the forward's output, and never stores an Lq x Lk matrix (only 64 x 64 tiles): tasks
// over key blocks accumulate dK, dV; tasks over query blocks accumulate dQ (and dBias); each tile's products are
// GEMMs. Compute type: double for fp64, else float.
#include "cpu_backward.hpp"

#include "attncheck/declarations.hpp"
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

// The scores of one query row over keys [j0, j0 + n) from raw dot products, the softcap derivative, visibility.
template <class T>
struct RowScores {
  std::vector<T> s, chain;
  T max = 0;
  void compute(const Problem& p, const Scorer<T>& sc, int64_t b, int64_t h, int64_t i, int64_t j0, const T* raw,
               int64_t n) {
    s.assign(raw, raw + n);
    chain.assign(static_cast<size_t>(n), T(1));
    if (p.softcap > 0) {
      const T scale = static_cast<T>(p.effective_scale()), c = static_cast<T>(p.softcap);
      for (int64_t j = 0; j < n; ++j) {
        const T t = std::tanh(scale * raw[j] / c);
        chain[static_cast<size_t>(j)] = T(1) - t * t;
      }
    }
    max = sc.process(b, h, i, j0, s.data(), n, sc.span(b, i));
  }
  // A masked key holds the fill; a visible key whose score is -inf (a -inf bias) has weight 0 either way.
  bool visible(const Scorer<T>& sc, int64_t j) const { return s[static_cast<size_t>(j)] != sc.fill(); }
};

// Whether row (b, h, i) has a visible key with a finite bias (otherwise it is fully masked: no gradient).
bool row_live(const Inputs& in, const Scorer<double>& sc, int64_t b, int64_t h, int64_t i) {
  const Span sp = sc.span(b, i);
  for (int64_t j = sp.lo; j < sp.hi; ++j) {
    if (in.mask && in.mask->get_offset(broadcast_offset(*in.mask, b, h, i, j)) == 0) continue;
    if (in.bias && !std::isfinite(in.bias->get_offset(broadcast_offset(*in.bias, b, h, i, j)))) continue;
    return true;
  }
  return false;
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
  const T scale = static_cast<T>(p.effective_scale()), ks = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  const int64_t G = p.group_size(), Lq = p.Lq, Lk = p.Lk;
  std::vector<double> dbias(g.dbias ? static_cast<size_t>(g.dbias->numel()) : 0, 0.0);
  // Units write dBias entries other units may share when the bias broadcasts over batch or heads: run in order.
  const bool shared_bias = p.bias_shape && ((*p.bias_shape)[0] == 1 || (*p.bias_shape)[1] == 1);
  parallel_tasks(p.B * p.Hkv, shared_bias ? 1 : cpu_threads(), [&](int64_t unit, int) {
    const int64_t b = unit / p.Hkv, kvh = unit % p.Hkv;
    const RowMat<T> K = load_head<T>(in.k, b, kvh, 0, Lk), V = load_head<T>(in.v, b, kvh, 0, Lk);
    RowMat<T> dK = RowMat<T>::Zero(Lk, p.Dqk), dV = RowMat<T>::Zero(Lk, p.Dv);
    RowScores<T> rs;
    for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
      RowMat<T> Q(Lq, p.Dqk), dO(Lq, p.Dv);
      load_rows(in.q, b, h, 0, Lq, Q.data());
      load_rows(dout, b, h, 0, Lq, dO.data());
      const RowMat<T> S = Q * K.transpose();  // raw dot products
      RowMat<T> P = RowMat<T>::Zero(Lq, Lk), Pk = P, dS = P, dR = P;
      const RowMat<T> dPk = dO * V.transpose();  // dP'_ij = dO_i · v_j
      for (int64_t i = 0; i < Lq; ++i) {
        rs.compute(p, sc, b, h, i, 0, S.row(i).data(), Lk);
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
          dS(i, j) = P(i, j) * (keep_factor(keep, j, ks) * dPk(i, j) - D);
          dR(i, j) = dS(i, j) * rs.chain[static_cast<size_t>(j)];
        }
        if (g.dbias)
          for (int64_t j = 0; j < Lk; ++j) dbias[static_cast<size_t>(broadcast_offset(*g.dbias, b, h, i, j))] += dS(i, j);
      }
      dV.noalias() += Pk.transpose() * dO;
      dK.noalias() += scale * (dR.transpose() * Q);
      const RowMat<T> dQ = scale * (dR * K);
      for (int64_t i = 0; i < Lq; ++i) store_row(g.dq, b, h, i, dQ.row(i).data());
    }
    for (int64_t j = 0; j < Lk; ++j) {
      store_row(g.dk, b, kvh, j, dK.row(j).data());
      store_row(g.dv, b, kvh, j, dV.row(j).data());
    }
  });
  if (g.dbias) store_dbias(dbias, g);
}

// cpu-flash: per-row lse (the forward's), D = dO·O (the forward's O) and liveness, then the two tiled passes.
template <class T>
void flash_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout, Gradients& g) {
  if (!fwd.lse) throw std::invalid_argument("cpu-flash backward: the forward's lse is missing (run it with want_lse)");
  const Scorer<T> sc(p, in);
  const Scorer<double> scd(p, in);
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
      live[row] = row_live(in, scd, b, h, i);
      lse[row] = static_cast<T>(fwd.lse->get_offset(static_cast<int64_t>(row)));
      D[row] = live[row] ? O.row(i).dot(dO.row(i)) : T(0);  // D_i = rowsum(dO ∘ O)
    }
  });

  // One query row against keys [j0, j0 + n), from its raw dot products q·k_j and dP'_ij = dO_i·v_j (GEMM rows):
  // weights P' (into pk), dS (into ds) and dR = dS · softcap' (into dr).
  auto row_grad = [&](RowScores<T>& rs, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, const T* raw,
                      const T* dpk, T* pk, T* ds, T* dr) {
    const size_t row = static_cast<size_t>((b * p.Hq + h) * Lq + i);
    rs.compute(p, sc, b, h, i, j0, raw, n);
    const uint8_t* keep = keep_row(p, in, b, h, i, j0);
    exp_shifted(rs.s.data(), pk, n, lse[row]);  // P: 0 where masked (-inf), exp(fill - lse) under a finite fill
    for (int64_t j = 0; j < n; ++j) {
      const bool vis = rs.visible(sc, j);
      const T P = pk[j], kf = keep_factor(keep, j, ks);
      pk[j] = P * kf;
      ds[j] = dr[j] = 0;
      if (!vis || P == T(0)) continue;  // never read: dpk may be inf (a huge value of an unseen key)
      const T dp = kf == T(0) ? T(0) : kf * dpk[j];
      ds[j] = P * (dp - D[row]);
      dr[j] = ds[j] * rs.chain[static_cast<size_t>(j)];
    }
  };
  // The GEMMs of one (query block, key block) tile: raw scores and dP' (rows of dead queries are skipped later).
  auto tile = [&](const RowMat<T>& Qb, const RowMat<T>& dOb, const RowMat<T>& Kb, const RowMat<T>& Vb, RowMat<T>& S,
                  RowMat<T>& dPk) {
    S.noalias() = Qb * Kb.transpose();
    dPk.noalias() = dOb * Vb.transpose();
  };

  // Pass 1: dK, dV, one task per (batch, KV head, key block), summing over the group's query heads (GQA), query
  // block by query block: dV += P'ᵀ·dO and dK += scale·dRᵀ·Q as GEMMs.
  const int64_t nkb = (Lk + kBwdBlockK - 1) / kBwdBlockK;
  parallel_tasks(p.B * p.Hkv * nkb, cpu_threads(), [&](int64_t task, int) {
    const int64_t b = task / (p.Hkv * nkb), kvh = (task / nkb) % p.Hkv, j0 = (task % nkb) * kBwdBlockK;
    const int64_t n = std::min(kBwdBlockK, Lk - j0);
    const RowMat<T> Kb = load_head<T>(in.k, b, kvh, j0, j0 + n), Vb = load_head<T>(in.v, b, kvh, j0, j0 + n);
    RowMat<T> dK = RowMat<T>::Zero(n, p.Dqk), dV = RowMat<T>::Zero(n, p.Dv), S, dPk, PK, DS, DR;
    RowScores<T> rs;
    for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h)
      for (int64_t i0 = 0; i0 < Lq; i0 += kBwdBlockQ) {
        const int64_t m = std::min(kBwdBlockQ, Lq - i0);
        RowMat<T> Qb(m, p.Dqk), dOb(m, p.Dv);
        load_rows(in.q, b, h, i0, i0 + m, Qb.data());
        load_rows(dout, b, h, i0, i0 + m, dOb.data());
        tile(Qb, dOb, Kb, Vb, S, dPk);
        PK.setZero(m, n);
        DS.setZero(m, n);
        DR.setZero(m, n);
        bool any = false;
        for (int64_t i = 0; i < m; ++i) {
          if (!live[static_cast<size_t>((b * p.Hq + h) * Lq + i0 + i)]) continue;
          any = true;
          row_grad(rs, b, h, i0 + i, j0, n, S.row(i).data(), dPk.row(i).data(), PK.row(i).data(), DS.row(i).data(),
                   DR.row(i).data());
        }
        if (!any) continue;
        dV.noalias() += PK.transpose() * dOb;
        dK.noalias() += scale * (DR.transpose() * Qb);
      }
    for (int64_t j = 0; j < n; ++j) {
      store_row(g.dk, b, kvh, j0 + j, dK.row(j).data());
      store_row(g.dv, b, kvh, j0 + j, dV.row(j).data());
    }
  });

  // Pass 2: dQ (and dBias), one task per (batch, query head, query block), key block by key block: dQ += scale·dR·K
  // as a GEMM. With a bias one task per head, so that rows broadcast onto one dBias row (bias dim 2 == 1) are summed
  // by one task.
  const int64_t bq = g.dbias ? Lq : kBwdBlockQ, nqb = (Lq + bq - 1) / bq;
  std::vector<double> dbias(g.dbias ? static_cast<size_t>(g.dbias->numel()) : 0, 0.0);
  parallel_tasks(p.B * p.Hq * nqb, cpu_threads(), [&](int64_t task, int) {
    const int64_t b = task / (p.Hq * nqb), h = (task / nqb) % p.Hq, i0 = (task % nqb) * bq;
    const int64_t m = std::min(Lq, i0 + bq) - i0, kvh = p.kv_head(h);
    RowMat<T> Qb(m, p.Dqk), dOb(m, p.Dv), dQ = RowMat<T>::Zero(m, p.Dqk), S, dPk, PK, DS, DR;
    load_rows(in.q, b, h, i0, i0 + m, Qb.data());
    load_rows(dout, b, h, i0, i0 + m, dOb.data());
    RowScores<T> rs;
    for (int64_t j0 = 0; j0 < Lk; j0 += kBwdBlockK) {
      const int64_t n = std::min(kBwdBlockK, Lk - j0);
      const RowMat<T> Kb = load_head<T>(in.k, b, kvh, j0, j0 + n), Vb = load_head<T>(in.v, b, kvh, j0, j0 + n);
      tile(Qb, dOb, Kb, Vb, S, dPk);
      PK.setZero(m, n);
      DS.setZero(m, n);
      DR.setZero(m, n);
      for (int64_t i = 0; i < m; ++i) {
        if (!live[static_cast<size_t>((b * p.Hq + h) * Lq + i0 + i)]) continue;
        row_grad(rs, b, h, i0 + i, j0, n, S.row(i).data(), dPk.row(i).data(), PK.row(i).data(), DS.row(i).data(),
                 DR.row(i).data());
        if (g.dbias)
          for (int64_t j = 0; j < n; ++j)
            dbias[static_cast<size_t>(broadcast_offset(*g.dbias, b, h, i0 + i, j0 + j))] += DS(i, j);
      }
      dQ.noalias() += scale * (DR * Kb);
    }
    for (int64_t i = 0; i < m; ++i) store_row(g.dq, b, h, i0 + i, dQ.row(i).data());
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

  Support supports_backward(const Problem& p) const override {
    if (Support s = f_->supports(p); !s.ok) return s;
    if (!p.sinks.empty()) return Support::no("backward with attention sinks not implemented");
    if (p.past_len > 0) return Support::no("backward with KV-cache append not implemented");
    if (!p.cu_seqlens_q.empty()) return Support::no("backward with packed sequences (varlen) not implemented");
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
  }

 private:
  ImplPtr f_;
  BackwardAlgo algo_;
};

}  // namespace

ImplPtr with_backward(ImplPtr fwd, BackwardAlgo algo) { return std::make_shared<WithBackward>(std::move(fwd), algo); }

}  // namespace attncheck::cpu
