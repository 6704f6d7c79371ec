// `cpu-flash`: the fused online-softmax implementation. One task = (batch, head, block of kFlashBlockQ queries);
// keys are visited in blocks of kFlashBlockK with a running max, denominator and rescaled accumulator, so no
// Lq x Lk matrix exists (memory per thread: O(Bq·Bk + (Bq + Bk)·D)). Blocks outside every row's causal /
// window / padding span are skipped (with a -inf fill they have exactly zero weight). Tail blocks are simply
// shorter: there are no padded phantom keys that could be scored 0. Weights, when requested, come from a second
// pass that recomputes each score block and normalises it with the final max and denominator.
#include "cpu_common.hpp"
#include "cpu_impls.hpp"

namespace attncheck::cpu {
namespace {

template <class T>
using MatMap = Eigen::Map<RowMat<T>>;

template <class T>
class Flash {
 public:
  Flash(const Problem& p, const Inputs& in, Outputs& out)
      : p_(p),
        in_(in),
        out_(out),
        sc_(p, in),
        keep_scale_(static_cast<T>(1.0 / (1.0 - p.dropout_p))),
        pol_w_(policy_weight<T>(p)),
        pol_lse_(policy_lse<T>(p)) {}

  void run() {
    const int64_t nqb = (p_.Lq + kFlashBlockQ - 1) / kFlashBlockQ, n = p_.B * p_.Hq * nqb;
    const int threads = static_cast<int>(std::min<int64_t>(cpu_threads(), n));
    std::vector<Work> work(static_cast<size_t>(std::max(threads, 1)));
    parallel_tasks(n, threads, [&](int64_t t, int worker) {
      const int64_t bh = t / nqb, qb = nqb - 1 - t % nqb;  // last query blocks first: causal's heaviest tasks
      const int64_t i0 = qb * kFlashBlockQ, i1 = std::min(i0 + kFlashBlockQ, p_.Lq);
      task(bh / p_.Hq, bh % p_.Hq, i0, i1, work[static_cast<size_t>(worker)]);
    });
  }

 private:
  struct Work {
    std::vector<T> Q, K, V, S, acc, m, mvis, l, bmax;  // bmax: this block's visible max per row
    std::vector<Span> spans;
    BadValues<T> bad;
  };
  static constexpr T kNegInf = -std::numeric_limits<T>::infinity();

  // Final scores of rows [i0, i0 + nr) against keys [j0, j0 + nc) into w.S (nr x nc). Only columns [c0, c1)
  // (the union of the rows' spans) go through the GEMM; the scorer fills the rest. Updates mvis when given.
  void scores(int64_t b, int64_t h, int64_t i0, int64_t nr, int64_t j0, int64_t nc, int64_t c0, int64_t c1,
              Work& w, T* mvis) const {
    MatMap<T> S(w.S.data(), nr, nc);
    if (c0 < c1) {
      MatMap<T> K(w.K.data(), c1 - c0, p_.Dqk);
      load_rows(in_.k, b, p_.kv_head(h), c0, c1, K.data());  // (c1 - c0, Dqk)
      S.middleCols(c0 - j0, c1 - c0).noalias() = MatMap<T>(w.Q.data(), nr, p_.Dqk) * K.transpose();
    }
    for (int64_t r = 0; r < nr; ++r) {
      const T mv = sc_.process(b, h, i0 + r, j0, S.row(r).data(), nc, w.spans[static_cast<size_t>(r)]);
      w.bmax[static_cast<size_t>(r)] = mv;
      if (mvis) mvis[r] = mv > mvis[r] ? mv : mvis[r];
    }
  }

  void task(int64_t b, int64_t h, int64_t i0, int64_t i1, Work& w) const {
    const int64_t nr = i1 - i0, Lk = p_.Lk, Dv = p_.Dv, Bk = kFlashBlockK;
    w.Q.resize(static_cast<size_t>(nr * p_.Dqk));
    w.K.resize(static_cast<size_t>(Bk * p_.Dqk));
    w.V.resize(static_cast<size_t>(Bk * Dv));
    w.S.resize(static_cast<size_t>(nr * Bk));
    w.acc.assign(static_cast<size_t>(nr * Dv), T(0));
    w.m.assign(static_cast<size_t>(nr), kNegInf);
    w.mvis.assign(static_cast<size_t>(nr), kNegInf);
    w.l.assign(static_cast<size_t>(nr), T(0));
    w.bmax.resize(static_cast<size_t>(nr));
    w.spans.resize(static_cast<size_t>(nr));
    load_rows(in_.q, b, h, i0, i1, w.Q.data());  // (nr, Dqk)
    int64_t ulo = Lk, uhi = 0;                   // union of the rows' visible spans
    for (int64_t r = 0; r < nr; ++r) {
      const Span s = w.spans[static_cast<size_t>(r)] = sc_.span(b, i0 + r);
      if (s.lo < s.hi) ulo = std::min(ulo, s.lo), uhi = std::max(uhi, s.hi);
    }
    const bool finite = sc_.finite_fill();
    MatMap<T> acc(w.acc.data(), nr, Dv);

    for (int64_t j0 = 0; j0 < Lk; j0 += Bk) {
      const int64_t j1 = std::min(j0 + Bk, Lk), nc = j1 - j0;
      const int64_t c0 = std::max(j0, ulo), c1 = std::min(j1, uhi);
      if (c0 >= c1 && !finite) continue;  // every key of the block is masked for every row: weight exactly 0
      scores(b, h, i0, nr, j0, nc, c0, c1, w, w.mvis.data());
      MatMap<T> S(w.S.data(), nr, nc);
      // Online softmax: S becomes exp(s - m_new) (times keep / (1 - p)); l and acc are rescaled to the new max.
      for (int64_t r = 0; r < nr; ++r) {
        T* s = S.row(r).data();
        T& m = w.m[static_cast<size_t>(r)];
        // Masked keys at -inf cannot raise the max; with a finite fill they take part like visible ones.
        const T m_new = finite ? row_max(s, nc, m) : std::max(m, w.bmax[static_cast<size_t>(r)]);
        if (m_new == kNegInf) {  // nothing with a finite score yet
          std::fill(s, s + nc, T(0));
          continue;
        }
        const T alpha = exp0(m - m_new);  // 0 on the first finite block (m = -inf)
        const T sum = exp_shifted(s, s, nc, m_new);
        w.l[static_cast<size_t>(r)] = w.l[static_cast<size_t>(r)] * alpha + sum;
        if (alpha != T(1)) acc.row(r) *= alpha;
        m = m_new;
        if (const uint8_t* keep = keep_row(p_, in_, b, h, i0 + r, j0)) apply_keep(s, keep, nc, keep_scale_);
      }
      // acc += P·V over the keys that can carry weight: the span union, or the whole block with a finite fill.
      const int64_t v0 = finite ? j0 : c0, v1 = finite ? j1 : c1;
      MatMap<T> V(w.V.data(), v1 - v0, Dv);
      load_rows(in_.v, b, p_.kv_head(h), v0, v1, V.data());  // (v1 - v0, Dv)
      w.bad.clear();
      w.bad.scan(V.data(), v1 - v0, Dv, v0 - j0);
      acc.noalias() += S.middleCols(v0 - j0, v1 - v0) * V;
      w.bad.add(S, acc);
    }

    std::vector<T> o(static_cast<size_t>(Dv));
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t i = i0 + r, row = (b * p_.Hq + h) * p_.Lq + i;
      T lse;
      if (w.mvis[static_cast<size_t>(r)] == kNegInf) {
        lse = pol_lse_;
        fully_masked_out(b, h, i, o.data(), w);
      } else {
        const T l = w.l[static_cast<size_t>(r)];
        for (int64_t d = 0; d < Dv; ++d) o[static_cast<size_t>(d)] = acc(r, d) / l;
        lse = w.m[static_cast<size_t>(r)] + std::log(l);
      }
      store_row(out_.out, b, h, i, o.data());
      if (out_.lse) out_.lse->data<T>()[row] = lse;
    }
    if (out_.weights) weights_pass(b, h, i0, nr, ulo, uhi, w);
  }

  // The output of a row without a visible key: every key weighs policy_weight (NaN, 1/Lk or 0), dropout applies.
  void fully_masked_out(int64_t b, int64_t h, int64_t i, T* o, Work& w) const {
    const int64_t Dv = p_.Dv;
    std::fill(o, o + Dv, T(0));
    if (p_.fully_masked == FullyMasked::zero) return;
    const uint8_t* keep = keep_row(p_, in_, b, h, i, 0);
    for (int64_t j0 = 0; j0 < p_.Lk; j0 += kFlashBlockK) {
      const int64_t j1 = std::min(j0 + kFlashBlockK, p_.Lk);
      load_rows(in_.v, b, p_.kv_head(h), j0, j1, w.V.data());
      for (int64_t j = j0; j < j1; ++j) {
        const T wj = keep ? (keep[j] ? pol_w_ * keep_scale_ : T(0)) : pol_w_;
        if (wj == T(0)) continue;  // a dropped key contributes nothing, as in the reference
        for (int64_t d = 0; d < Dv; ++d) o[d] += wj * w.V[static_cast<size_t>((j - j0) * Dv + d)];
      }
    }
  }

  // Second pass for want_weights: recompute each score block, write exp(s - m) / l with the final m and l.
  void weights_pass(int64_t b, int64_t h, int64_t i0, int64_t nr, int64_t ulo, int64_t uhi, Work& w) const {
    T* base = out_.weights->data<T>() + ((b * p_.Hq + h) * p_.Lq + i0) * p_.Lk;  // (nr, Lk), contiguous
    for (int64_t j0 = 0; j0 < p_.Lk; j0 += kFlashBlockK) {
      const int64_t j1 = std::min(j0 + kFlashBlockK, p_.Lk), nc = j1 - j0;
      const int64_t c0 = std::max(j0, ulo), c1 = std::min(j1, uhi);
      const bool skipped = c0 >= c1 && !sc_.finite_fill();
      if (!skipped) scores(b, h, i0, nr, j0, nc, c0, c1, w, nullptr);
      for (int64_t r = 0; r < nr; ++r) {
        T* dst = base + r * p_.Lk + j0;
        if (w.mvis[static_cast<size_t>(r)] == kNegInf) {
          std::fill(dst, dst + nc, pol_w_);
        } else if (skipped) {
          std::fill(dst, dst + nc, T(0));
        } else {
          exp_shifted(w.S.data() + r * nc, dst, nc, w.m[static_cast<size_t>(r)]);
          ArrMap<T>(dst, nc) /= w.l[static_cast<size_t>(r)];
        }
      }
    }
  }

  const Problem& p_;
  const Inputs& in_;
  Outputs& out_;
  const Scorer<T> sc_;
  const T keep_scale_, pol_w_, pol_lse_;
};

class FlashImpl final : public Impl {
 public:
  std::string name() const override { return "cpu-flash"; }
  std::string description() const override {
    return "fused online softmax over key blocks, threads over (batch, head, query block); never forms Lq x Lk";
  }
  Capabilities capabilities() const override {
    Capabilities c;  // everything the problem model has
    c.notes = "fp64 in double; fp32/fp16/bf16 in float, output rounded once; weights by a second pass";
    return c;
  }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    if (p.dtype == DType::f64)
      Flash<double>(p, in, out).run();
    else
      Flash<float>(p, in, out).run();
  }
};

}  // namespace

ImplPtr make_flash_impl() { return std::make_shared<FlashImpl>(); }

}  // namespace attncheck::cpu
