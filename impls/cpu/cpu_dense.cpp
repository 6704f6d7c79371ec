// `cpu`: the dense vectorised implementation. Per (batch, head): S = Q·Kᵀ with the SIMD GEMM (simd.hpp; Lq x Lk,
// the whole score matrix), the reference's score pipeline and a max-subtracted softmax row by row, then O = P·V
// with a second GEMM. fp64 computes in double; fp32/fp16/bf16 in float, rounded once into the output dtype.
#include "cpu_common.hpp"
#include "cpu_impls.hpp"
#include "cpu_pack.hpp"

namespace attncheck::cpu {
namespace {

template <class T>
void dense_attention(const Problem& p, const Inputs& in, Outputs& out) {
  const int64_t Lq = p.Lq, Lk = p.Lk, Dqk = p.Dqk, Dv = p.Dv;
  const Scorer<T> scorer(p, in);
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  const T pol_w = policy_weight<T>(p), pol_lse = policy_lse<T>(p);
  const int64_t W = simd::strip_width<T>(), ld = (Lk + W - 1) / W * W, dvp = (Dv + W - 1) / W * W;

  struct Work {
    std::vector<T> Q, S, O;
    Panels<T> pan;
  };
  const int threads = static_cast<int>(std::min<int64_t>(cpu_threads(), p.B * p.Hq));
  std::vector<Work> work(static_cast<size_t>(std::max(threads, 1)));

  parallel_tasks(p.B * p.Hq, threads, [&](int64_t task, int worker) {
    Work& w = work[static_cast<size_t>(worker)];
    const int64_t b = task / p.Hq, h = task % p.Hq;
    w.Q.resize(static_cast<size_t>(Lq * Dqk));
    load_rows(in.q, b, h, 0, Lq, w.Q.data());  // (Lq, Dqk)
    w.pan.pack(p, in, b, p.kv_head(h), 0, Lk);  // Kᵀ and V panels, non-finite V rows set aside
    w.S.resize(static_cast<size_t>(Lq * ld));
    // Raw dot products; masked columns are overwritten by the scorer.
    simd::gemm<T>(Lq, Lk, Dqk, w.Q.data(), Dqk, w.pan.kt_at(0), Dqk * W, w.S.data(), ld, false);

    for (int64_t i = 0; i < Lq; ++i) {
      T* s = w.S.data() + i * ld;
      const T mvis = scorer.process(b, h, i, 0, s, Lk, scorer.span(b, i));
      T lse;
      if (mvis == -std::numeric_limits<T>::infinity()) {  // no visible key (or all visible at -inf)
        std::fill(s, s + Lk, pol_w);
        lse = pol_lse;
      } else {
        // With a finite fill the masked keys take part, as in the reference's max(m, fill); -inf ones cannot matter.
        const T m = scorer.finite_fill() ? row_max(s, Lk, mvis) : mvis;
        const T sum = exp_shifted(s, s, Lk, m);
        for (int64_t j = 0; j < Lk; ++j) s[j] /= sum;
        lse = m + std::log(sum);
      }
      const int64_t row = (b * p.Hq + h) * Lq + i;
      if (out.lse) out.lse->data<T>()[row] = lse;
      if (out.weights) std::copy(s, s + Lk, out.weights->data<T>() + row * Lk);  // weights are pre-dropout
      if (const uint8_t* keep = keep_row(p, in, b, h, i, 0)) apply_keep(s, keep, Lk, keep_scale);
    }

    w.O.resize(static_cast<size_t>(Lq * dvp));
    simd::gemm<T>(Lq, Dv, Lk, w.S.data(), ld, w.pan.v_at(0), w.pan.vstride(), w.O.data(), dvp, false);
    w.pan.add_bad(w.S.data(), ld, Lq, 0, 0, Lk, w.O.data(), dvp);
    for (int64_t i = 0; i < Lq; ++i) store_row(out.out, b, h, i, w.O.data() + i * dvp);
  });
}

class DenseImpl final : public Impl {
 public:
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "dense: S = Q·Kᵀ per (batch, head), row softmax, O = P·V (runtime-dispatched SIMD GEMM); threads over (batch, head)";
  }
  Capabilities capabilities() const override {
    Capabilities c;  // everything the problem model has
    c.notes = "fp64 in double; fp32/fp16/bf16 in float, output rounded once; materialises Lq x Lk per thread";
    return c;
  }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    if (p.dtype == DType::f64)
      dense_attention<double>(p, in, out);
    else
      dense_attention<float>(p, in, out);
  }
};

}  // namespace

ImplPtr make_dense_impl() { return std::make_shared<DenseImpl>(); }

}  // namespace attncheck::cpu
