// `cpu`: the dense vectorised implementation. Per (batch, head) and block of 96 query rows: S = Q·Kᵀ with the SIMD
// GEMM (simd.hpp; whole score rows, 96 x Lk), the reference's score pipeline and a max-subtracted softmax row by
// row, then O = P·V with a second GEMM. fp64 computes in double; fp32/fp16/bf16 in float, rounded once into the
// output dtype.
#include "cpu_common.hpp"
#include "cpu_merge.hpp"
#include "cpu_impls.hpp"
#include "cpu_pack.hpp"

namespace attncheck::cpu {
namespace {

// Query rows per GEMM block: keys no row of the block can see (causal, windows, padding) are left out.
constexpr int64_t kRowBlock = 96;

template <class T>
void dense_attention(const Problem& p, const Inputs& in, Outputs& out) {
  const int64_t Lq = p.Lq, Lk = p.Lk, Dqk = p.Dqk, Dv = p.Dv;
  const Scorer<T> scorer(p, in);
  const bool raw_scores = p.scores_out == ScoresOut::scaled || p.scores_out == ScoresOut::capped;
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  const T pol_w = policy_weight<T>(p), pol_lse = policy_lse<T>(p);
  const int64_t W = simd::strip_width<T>(), ld = (Lk + W - 1) / W * W, dvp = (Dv + W - 1) / W * W;

  // avx3_bf16: Q·Kᵀ on bf16 pairs (cpu_pack.hpp), unless a Q row or the K panel of the head holds a subnormal.
  const bool pairs = std::is_same_v<T, float> && bf16_pairs_apply(p, in);
  const RopeStage rope(p);
  struct Work {
    std::vector<T> Q, S, O, div;
    std::vector<uint32_t> Q2;
    Panels<T> pan;
  };
  const int threads = static_cast<int>(std::min<int64_t>(cpu_threads(), p.B * p.Hq));
  std::vector<Work> work(static_cast<size_t>(std::max(threads, 1)));

  parallel_tasks(p.B * p.Hq, threads, [&](int64_t task, int worker) {
    Work& w = work[static_cast<size_t>(worker)];
    const int64_t b = task / p.Hq, h = task % p.Hq;
    w.Q.resize(static_cast<size_t>(Lq * Dqk));
    load_rows(in.q, b, h, 0, Lq, w.Q.data());            // (Lq, Dqk)
    rotate_rows(rope, true, b, 0, Lq, Dqk, w.Q.data());  // RoPE (no-op without)
    // Kᵀ and V panels (K rows as they are for a few queries: no transposed copy for so little use), non-finite V
    // rows set aside.
    w.pan.pack(p, in, b, p.kv_head(h), 0, Lk, Lq <= kFewRows, pairs);
    bool q2 = false;
    if constexpr (std::is_same_v<T, float>) q2 = w.pan.pairs && q_as_pairs(w.Q.data(), Lq, Dqk, w.Q2);
    // Scores of one row block at a time (kRowBlock x Lk): each block's softmax and P·V finish before the next,
    // so the whole Lq x Lk matrix never exists and the block stays in cache between the passes over it.
    w.S.resize(static_cast<size_t>(std::min(kRowBlock, Lq) * ld));
    w.O.resize(static_cast<size_t>(Lq * dvp));
    w.div.assign(static_cast<size_t>(Lq), T(1));  // per row: the softmax sum when P is left unnormalised
    const bool finite = scorer.finite_fill();
    for (int64_t r0 = 0; r0 < Lq; r0 += kRowBlock) {
      const int64_t nr = std::min(kRowBlock, Lq - r0);
      T* S = w.S.data();  // row i of the block at S + (i - r0) * ld
      // Keys any row of the block can see (all of them with a finite fill): only those go through the GEMMs.
      int64_t lo = Lk, hi = 0;
      for (int64_t i = r0; i < r0 + nr; ++i)
        if (const Span sp = scorer.span(b, i); sp.lo < sp.hi) lo = std::min(lo, sp.lo), hi = std::max(hi, sp.hi);
      if (finite || raw_scores) lo = 0, hi = Lk;  // raw scores: every key's dot product
      if (lo < hi && w.pan.rows) {
        w.pan.dots_rows(nr, hi - lo, w.Q.data() + r0 * Dqk, Dqk, lo, S + lo, ld);
      } else if (lo < hi) {  // raw dot products; masked columns are overwritten by the scorer
        const int64_t sa = lo / W, sb = (hi + W - 1) / W;
        if (q2)
          w.pan.dots_pairs(nr, (sb - sa) * W, w.Q2.data() + r0 * w.pan.kp, sa * W, S + sa * W, ld);
        else
          simd::gemm<T>(nr, (sb - sa) * W, Dqk, w.Q.data() + r0 * Dqk, Dqk, w.pan.kt_at(sa * W), Dqk * W, W, S + sa * W,
                        ld, false);
      }
      bool policy_rows = false;  // rows without a visible key weigh every key
      const T kNegInf = -std::numeric_limits<T>::infinity(), sink = static_cast<T>(p.sink(h));
      for (int64_t i = r0; i < r0 + nr; ++i) {
        T* s = S + (i - r0) * ld;
        const Span sp = scorer.span(b, i);
        T* scores = out.scores ? out.scores->data<T>() + ((b * p.Hq + h) * Lq + i) * Lk : nullptr;
        if (scores && raw_scores) scorer.staged(s, scores, Lk, p.scores_out);
        const T mvis = scorer.process(b, h, i, 0, s, Lk, sp);
        if (out.max_logit)  // the largest visible softmax input, before any exp
          out.max_logit->data<T>()[(b * p.Hq + h) * Lq + i] = mvis == kNegInf ? policy_max_logit<T>(p) : mvis;
        if (scores && !raw_scores) std::copy(s, s + Lk, scores);  // the softmax's input, masked keys = fill
        T lse;
        if (mvis == kNegInf && sink == kNegInf) {  // no visible key (or all visible at -inf), no sink
          std::fill(s, s + Lk, pol_w);
          lse = pol_lse;
          policy_rows = policy_rows || pol_w != T(0);
        } else {
          // With a finite fill the masked keys take part, as in the reference's max(m, fill); with -inf they
          // weigh exactly 0, so the exp runs over the span only. The sink adds exp(sink - m), no value.
          const T m = std::max(finite ? row_max(s, Lk, mvis) : mvis, sink);
          const int64_t a = finite ? 0 : sp.lo, e = finite ? Lk : sp.hi;
          std::fill(s, s + a, T(0));
          std::fill(s + e, s + Lk, T(0));
          const T sum = exp_shifted(s + a, s + a, e - a, m) + (sink == kNegInf ? T(0) : exp0(sink - m));
          // Without the weights output P stays unnormalised and the output row is divided instead (Lk divisions
          // become Dv, as in cpu-flash's acc / l).
          if (out.weights)
            for (int64_t j = a; j < e; ++j) s[j] /= sum;
          else
            w.div[static_cast<size_t>(i)] = sum;
          lse = m + std::log(sum);
        }
        const int64_t row = (b * p.Hq + h) * Lq + i;
        if (out.lse) out.lse->data<T>()[row] = lse;
        if (out.weights) std::copy(s, s + Lk, out.weights->data<T>() + row * Lk);  // weights are pre-dropout
        if (const uint8_t* keep = keep_row(p, in, b, h, i, 0)) apply_keep(s, keep, Lk, keep_scale);
      }
      if (policy_rows) lo = 0, hi = Lk;
      hi = std::max(lo, hi);
      T* O = w.O.data() + r0 * dvp;
      w.pan.pv(nr, hi - lo, S + lo, ld, lo, O, dvp, false);
      w.pan.add_bad(S, ld, nr, 0, lo, hi, O, dvp);
    }
    for (int64_t i = 0; i < Lq; ++i) {
      T* o = w.O.data() + i * dvp;
      if (const T d = w.div[static_cast<size_t>(i)]; d != T(1))
        for (int64_t c = 0; c < Dv; ++c) o[c] /= d;
      store_row(out.out, b, h, i, o);
    }
  });
}

class DenseImpl final : public Impl {
 public:
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "dense: S = Q·Kᵀ per (batch, head), row softmax, O = P·V (runtime-dispatched SIMD GEMM); threads over "
           "(batch, head)";
  }
  Capabilities capabilities() const override {
    return cpu_capabilities(
        "fp64 in double; fp32/fp16/bf16/fp8 in float, output rounded once; materialises 96 x Lk score rows per thread");
  }
  // Tasks are (batch, head) pairs computed alike whatever thread takes them, each reading its own entry's keys:
  // the same bits for any thread count, run after run, in any batch and in any layout or strides (rows are loaded
  // into contiguous buffers first; tests/invariance/test_invariance.cpp).
  Declarations declarations() const override {
    Declarations d = p_exact_declarations(capabilities());
    d.deterministic = d.batch_invariant = true;
    d.schedule_knobs = d.schedule_bitwise = knob_threads;
    d.layout_invariant = true;
    return d;
  }
  Support supports_merge(const MergeProblem& p) const override { return merge_supported(p); }
  void run_merge(const MergeProblem& p, const StoredStates& in, StoredStates& out) const override {
    merge_fp32(p, in, out);
  }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    run_cpu(p, in, out, [](const Problem& q, const Inputs& x, Outputs& o) {
      if (q.dtype == DType::f64)
        dense_attention<double>(q, x, o);
      else
        dense_attention<float>(q, x, o);
    });
  }
};

}  // namespace

ImplPtr make_dense_impl() { return std::make_shared<DenseImpl>(); }

}  // namespace attncheck::cpu
