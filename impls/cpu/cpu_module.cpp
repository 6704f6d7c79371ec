// The module entries of `cpu` and `cpu-flash`: the projections and Wo on the backend's own GEMM engine
// (simd::gemm, fp32 accumulation for fp32/fp16/bf16), q/k/v and the merged heads rounded to the module dtype,
// the attention by the backend itself. Written apart from the reference (module_reference.cpp): the packed
// weight is one GEMM whose output columns are split here. Module mutants inject one ModuleFault each.
#include <cmath>

#include "attncheck/impl.hpp"
#include "attncheck/module_impl.hpp"
#include "simd.hpp"

namespace attncheck {

namespace {

size_t at(int64_t i) { return static_cast<size_t>(i); }

template <class T>
struct Gemm {  // C [m, n] = A [m, k] · Wᵀ for W [n, k], on simd::gemm with Wᵀ packed in strips
  static std::vector<T> run(const std::vector<T>& A, int64_t m, int64_t k, const std::vector<double>& W, int64_t n,
                            int64_t& ldc) {
    const int64_t Wd = cpu::simd::strip_width<T>(), npad = (n + Wd - 1) / Wd * Wd;
    std::vector<T> B(at(k * npad), T(0));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t e = 0; e < k; ++e) B[at(e * npad + r)] = static_cast<T>(W[at(r * k + e)]);
    std::vector<T> C(at(std::max<int64_t>(m, 1) * npad));
    cpu::simd::gemm<T>(m, n, k, A.data(), k, B.data(), Wd, npad, C.data(), npad, false);
    ldc = npad;
    return C;
  }
};

template <class T>
std::vector<T> widen(const Tensor& t) {
  const std::vector<double> d = t.to_double();
  return std::vector<T>(d.begin(), d.end());
}

class CpuModule final : public ModuleImpl {
 public:
  CpuModule(ImplPtr attention, ModuleFault fault) : attn_(std::move(attention)), fault_(fault) {}
  std::string name() const override {
    return attn_->name() + (fault_ == ModuleFault::none ? "" : std::string("~") + to_string(fault_));
  }
  Support supports(const ModuleProblem& m) const override {
    if (m.attn.dtype == DType::f64) return Support::no("module entry: fp64 modules are not implemented (fp32, fp16, bf16)");
    Problem a = m.attn;
    return attn_->supports(a);
  }
  void run(const ModuleProblem& m, const ModuleInputs& in, ModuleOutputs& out) const override {
    cpu::simd::select_target();
    run_t<float>(m, in, out);
  }

 private:
  // Column of the projection output that holds feature d of head h of q (0), k (1) or v (2).
  int64_t column(const ModuleProblem& m, int which, int64_t h, int64_t d) const {
    const Problem& p = m.attn;
    Packing pk = m.packing;
    if (fault_ == ModuleFault::qkv_order && pk != Packing::separate)
      pk = pk == Packing::packed ? Packing::interleaved : Packing::packed;
    const int64_t D = which == 2 ? p.Dv : p.Dqk;
    if (pk == Packing::separate) return h * D + d;
    const int64_t nq = p.Hq * p.Dqk, nk = p.Hkv * p.Dqk;
    if (pk == Packing::packed) return (which == 0 ? 0 : which == 1 ? nq : nq + nk) + h * D + d;
    // interleaved: per KV head g a block [G query heads | k_g | v_g]
    const int64_t G = p.Hq / p.Hkv, width = G * p.Dqk + p.Dqk + p.Dv;
    if (which == 0) return (h / G) * width + (h % G) * p.Dqk + d;
    return h * width + G * p.Dqk + (which == 2 ? p.Dqk : 0) + d;
  }

  // Project x (tokens [B, L, in]) with W [n, in] and bias, then split heads of `which` into t [B, H, L, D].
  template <class T>
  void project(const ModuleProblem& m, const Tensor& x, const Tensor& W, const std::optional<Tensor>& bias,
               int which, Tensor& t) const {
    const int64_t B = x.shape[0], L = x.shape[1], in = x.shape[2], n = W.shape[0];
    const int64_t H = t.shape[1], D = t.shape[3];
    int64_t ldc = 0;
    std::vector<T> C = Gemm<T>::run(widen<T>(x), B * L, in, W.to_double(), n, ldc);
    const std::vector<double> b = bias ? bias->to_double() : std::vector<double>{};
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t d = 0; d < D; ++d) {
            int64_t tok = l, hh = h, dd = d;
            if (fault_ == ModuleFault::head_split) {  // [B, L, H*D] memory read as [B, H, L, D]
              const int64_t f = (h * L + l) * D + d;
              tok = f / (H * D), hh = (f % (H * D)) / D, dd = f % D;
            }
            const int64_t c = column(m, which, hh, dd);
            T v = C[at((bb * L + tok) * ldc + c)];
            if (!b.empty()) v += static_cast<T>(b[at(c)]);
            t.put(bb, h, l, d, static_cast<double>(v));  // rounds to the module dtype
          }
  }

  template <class T>
  void run_t(const ModuleProblem& m, const ModuleInputs& in, ModuleOutputs& out) const {
    const Problem& p = m.attn;
    Problem a = p;
    Inputs ai{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), in.mask, in.bias, in.keep, {}, {}};
    const Tensor& xkv = m.cross() ? *in.x2 : in.x;
    if (m.packing == Packing::separate) {
      project<T>(m, in.x, *in.wq, in.bq, 0, ai.q);
      project<T>(m, xkv, *in.wk, in.bk, 1, ai.k);
      project<T>(m, xkv, *in.wv, in.bv, 2, ai.v);
    } else {
      project<T>(m, in.x, *in.wqkv, in.bqkv, 0, ai.q);
      project<T>(m, xkv, *in.wqkv, in.bqkv, 1, ai.k);
      project<T>(m, xkv, *in.wqkv, in.bqkv, 2, ai.v);
    }
    if (fault_ == ModuleFault::scale_d_model && !p.scale) a.scale = 1.0 / std::sqrt(static_cast<double>(p.Hq * p.Dqk));
    if (fault_ == ModuleFault::key_padding_broadcast && is_key_padding(m) && !m.cross()) {
      Tensor mq(DType::u8, {p.B, 1, p.Lq, 1});  // mask.view(B, 1, L, 1): the padding applied to queries
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t i = 0; i < p.Lq; ++i) mq.put(b, 0, i, 0, in.mask->at(b, 0, 0, i));
      a.mask_shape = std::array<int64_t, 4>{p.B, 1, p.Lq, 1};
      ai.mask = mq;
    }
    if (fault_ == ModuleFault::dropout_after_projection) a.dropout_p = 0, ai.keep.reset();
    Outputs ao;
    const Support s = run_impl(*attn_, a, ai, ao);
    if (!s.ok) throw std::runtime_error("module entry: the attention refused the problem: " + s.reason);

    // Merge heads: o [B, Hq, Lq, Dv] -> [B, Lq, Hq*Dv] (transpose then view; the head-split bug only views).
    const int64_t HD = p.Hq * p.Dv;
    std::vector<T> merged(at(p.B * p.Lq * HD));
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i)
          for (int64_t d = 0; d < p.Dv; ++d) {
            const int64_t src = ((b * p.Hq + h) * p.Lq + i) * p.Dv + d;
            const int64_t dst = fault_ == ModuleFault::head_split ? src : (b * p.Lq + i) * HD + h * p.Dv + d;
            merged[at(dst)] = static_cast<T>(ao.out.at(b, h, i, d));
          }
    int64_t ldc = 0;
    const std::vector<T> Y = Gemm<T>::run(merged, p.B * p.Lq, HD, in.wo.to_double(), m.d_out, ldc);
    const std::vector<double> bo =
        m.out_bias && fault_ != ModuleFault::out_bias ? in.bo->to_double() : std::vector<double>{};
    for (int64_t tok = 0; tok < p.B * p.Lq; ++tok)
      for (int64_t c = 0; c < m.d_out; ++c) {
        T y = Y[at(tok * ldc + c)];
        if (!bo.empty()) y += static_cast<T>(bo[at(c)]);
        if (fault_ == ModuleFault::dropout_after_projection && p.dropout_p > 0)
          y = in.keep->at(tok / p.Lq, 0, tok % p.Lq, c % p.Lk) != 0 ? y / static_cast<T>(1.0 - p.dropout_p) : T(0);
        out.y.set_offset(tok * m.d_out + c, static_cast<double>(y));
      }
    if (p.want_weights) {
      const Tensor& w = *ao.weights;
      if (!m.average_weights) {
        for (int64_t n = 0; n < w.numel(); ++n) out.weights->set_offset(n, w.get_offset(n));
      } else {
        const double div = fault_ == ModuleFault::weights_average ? 1.0 : static_cast<double>(p.Hq);
        for (int64_t b = 0; b < p.B; ++b)
          for (int64_t i = 0; i < p.Lq; ++i)
            for (int64_t j = 0; j < p.Lk; ++j) {
              double s = 0;
              for (int64_t h = 0; h < p.Hq; ++h) s += w.at(b, h, i, j);
              out.weights->set_offset((b * p.Lq + i) * p.Lk + j, s / div);
            }
      }
    }
  }

  ImplPtr attn_;
  ModuleFault fault_;
};

}  // namespace

ModuleImplPtr make_cpu_module(ImplPtr attention, ModuleFault fault) {
  return std::make_shared<CpuModule>(std::move(attention), fault);
}

}  // namespace attncheck
