// The module entries of `cpu` and `cpu-flash`: the projections and Wo on the backend's own GEMM engine
// (simd::gemm, fp32 accumulation for fp32/fp16/bf16, fp64 for fp64), q/k/v and the merged heads rounded to the
// module dtype, the attention by the backend itself. Written apart from the reference (module_reference.cpp): the
// packed weight is one GEMM whose output columns are split here. Module mutants inject one ModuleFault each.
#include <cmath>

#include "attncheck/backward.hpp"
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
  CpuModule(ImplPtr attention, ModuleFault fault, ModuleGradFault grad_fault)
      : attn_(std::move(attention)), fault_(fault), grad_fault_(grad_fault) {}
  std::string name() const override {
    if (grad_fault_ != ModuleGradFault::none) return attn_->name() + "~" + to_string(grad_fault_);
    return attn_->name() + (fault_ == ModuleFault::none ? "" : std::string("~") + to_string(fault_));
  }
  Support supports(const ModuleProblem& m) const override {
    Problem a = m.attn;
    return attn_->supports(a);
  }
  void run(const ModuleProblem& m, const ModuleInputs& in, ModuleOutputs& out) const override {
    cpu::simd::select_target();
    if (m.attn.dtype == DType::f64)
      run_t<double>(m, in, out);
    else
      run_t<float>(m, in, out);
  }
  Support supports_backward(const ModuleProblem& m) const override {
    if (fault_ != ModuleFault::none) return Support::no("module entry: a forward mutant has no backward");
    Problem a = m.attn;
    a.want_weights = false, a.want_lse = true;
    return attn_->supports_backward(a);
  }
  void run_backward(const ModuleProblem& m, const ModuleInputs& in, const Tensor& dy,
                    ModuleGradOutputs& g) const override {
    cpu::simd::select_target();
    if (m.attn.dtype == DType::f64)
      backward_t<double>(m, in, dy, g);
    else
      backward_t<float>(m, in, dy, g);
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
  void project(const ModuleProblem& m, const Tensor& x, const Tensor& W, const std::optional<Tensor>& bias, int which,
               Tensor& t) const {
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
  struct Forward {  // what the forward keeps for y, the weights and the backward
    Problem a;
    Inputs ai;
    Outputs ao;
    std::vector<T> merged;  // [B, Lq, Hq*Dv], the attention output as rounded to the dtype
  };

  template <class T>
  Forward<T> forward(const ModuleProblem& m, const ModuleInputs& in, bool want_lse) const {
    const Problem& p = m.attn;
    Forward<T> f{p, Inputs{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), in.mask, in.bias, in.keep, {}, {}}, {}, {}};
    Problem& a = f.a;
    Inputs& ai = f.ai;
    a.want_lse = a.want_lse || want_lse;
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
    const Support s = run_impl(*attn_, a, ai, f.ao);
    if (!s.ok) throw std::runtime_error("module entry: the attention refused the problem: " + s.reason);

    // Merge heads: o [B, Hq, Lq, Dv] -> [B, Lq, Hq*Dv] (transpose then view; the head-split bug only views).
    const int64_t HD = p.Hq * p.Dv;
    f.merged.resize(at(p.B * p.Lq * HD));
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i)
          for (int64_t d = 0; d < p.Dv; ++d) {
            const int64_t src = ((b * p.Hq + h) * p.Lq + i) * p.Dv + d;
            const int64_t dst = fault_ == ModuleFault::head_split ? src : (b * p.Lq + i) * HD + h * p.Dv + d;
            f.merged[at(dst)] = static_cast<T>(f.ao.out.at(b, h, i, d));
          }
    return f;
  }

  template <class T>
  void run_t(const ModuleProblem& m, const ModuleInputs& in, ModuleOutputs& out) const {
    const Problem& p = m.attn;
    const Forward<T> f = forward<T>(m, in, false);
    const std::vector<T>& merged = f.merged;
    const Outputs& ao = f.ao;
    const int64_t HD = p.Hq * p.Dv;
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

  template <class T>
  void backward_t(const ModuleProblem& m, const ModuleInputs& in, const Tensor& dy, ModuleGradOutputs& g) const;

  ImplPtr attn_;
  ModuleFault fault_;
  ModuleGradFault grad_fault_;
};

// The backward, in the order of the forward read backwards, every GEMM on simd::gemm (fp32, fp64 for fp64):
// dbo = sum dy, dWo = dyᵀ·merged, dO = dy·Wo (rounded to the dtype), the attention's own backward, then per
// projection dW = dzᵀ·x, db = sum dz and dx += dz·W (the paths into x summed in T, rounded once).
template <class T>
void CpuModule::backward_t(const ModuleProblem& m, const ModuleInputs& in, const Tensor& dy,
                           ModuleGradOutputs& g) const {
  const Problem& p = m.attn;
  const Forward<T> f = forward<T>(m, in, true);
  const int64_t tokens = p.B * p.Lq, HD = p.Hq * p.Dv;
  const std::vector<double> dyd = dy.to_double();
  auto transposed = [](const std::vector<double>& v, int64_t rows, int64_t cols) {  // [rows, cols] -> [cols, rows]
    std::vector<double> t(v.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) t[at(c * rows + r)] = v[at(r * cols + c)];
    return t;
  };
  if (m.out_bias) {
    Tensor& dbo = g.at("dbo");
    for (int64_t c = 0; c < m.d_out; ++c) {
      T s = 0;
      for (int64_t tok = 0; tok < tokens; ++tok) s += static_cast<T>(dyd[at(tok * m.d_out + c)]);
      dbo.set_offset(c, grad_fault_ == ModuleGradFault::out_bias_grad ? 0.0 : static_cast<double>(s));
    }
  }
  const std::vector<double> dyT = transposed(dyd, tokens, m.d_out);
  {  // dWo [d_out, HD] = dyᵀ [d_out, tokens] · merged [tokens, HD]
    const std::vector<double> merged(f.merged.begin(), f.merged.end());
    int64_t ldc = 0;
    const std::vector<T> C =
        Gemm<T>::run(std::vector<T>(dyT.begin(), dyT.end()), m.d_out, tokens, transposed(merged, tokens, HD), HD, ldc);
    Tensor& dwo = g.at("dwo");
    for (int64_t c = 0; c < m.d_out; ++c)
      for (int64_t e = 0; e < HD; ++e)
        dwo.set_offset(grad_fault_ == ModuleGradFault::wo_transposed ? e * m.d_out + c : c * HD + e,
                       static_cast<double>(C[at(c * ldc + e)]));
  }
  Tensor dout(p.dtype, {p.B, p.Hq, p.Lq, p.Dv});
  {  // dO = dy [tokens, d_out] · Wo [d_out, HD], split into heads, rounded to the dtype
    int64_t ldc = 0;
    const std::vector<T> C =
        Gemm<T>::run(widen<T>(dy), tokens, m.d_out, transposed(in.wo.to_double(), m.d_out, HD), HD, ldc);
    for (int64_t tok = 0; tok < tokens; ++tok)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t d = 0; d < p.Dv; ++d)
          dout.put(tok / p.Lq, h, tok % p.Lq, d, static_cast<double>(C[at(tok * ldc + h * p.Dv + d)]));
  }
  Gradients ag;
  if (Support s = run_backward_impl(*attn_, f.a, f.ai, dout, ag); !s.ok)
    throw std::runtime_error("module entry: the attention refused the backward: " + s.reason);
  if (ag.dbias) {
    Tensor& db = g.at("dbias");
    for (int64_t n = 0; n < db.numel(); ++n) db.set_offset(n, ag.dbias->get_offset(n));
  }
  // The projections backwards.
  std::vector<T> dx(at(in.x.numel()), T(0)), dx2(m.cross() ? at(in.x2->numel()) : 0, T(0));
  const Tensor* dz[3] = {&ag.dq, &ag.dk, &ag.dv};
  for (int which = 0; which < 3; ++which) {
    const bool kv = which > 0;
    const Tensor& x = kv && m.cross() ? *in.x2 : in.x;
    const int64_t H = which == 0 ? p.Hq : p.Hkv, D = which == 2 ? p.Dv : p.Dqk, n = H * D;
    const int64_t L = x.shape[1], T_ = p.B * L, nin = x.shape[2];
    // This projection's weight rows [n, nin] (a packed weight's rows for q, k or v, head-major).
    const Tensor& Wt = m.packing == Packing::separate ? (which == 0 ? *in.wq : which == 1 ? *in.wk : *in.wv) : *in.wqkv;
    const std::vector<double> wall = Wt.to_double();
    std::vector<double> w(at(n * nin));
    std::vector<int64_t> row(at(n));
    for (int64_t c = 0; c < n; ++c) {
      row[at(c)] = column(m, which, c / D, c % D);
      for (int64_t e = 0; e < nin; ++e) w[at(c * nin + e)] = wall[at(row[at(c)] * nin + e)];
    }
    std::vector<double> z(at(T_ * n));  // dz [tokens, n] from the delivered [B, H, L, D]
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t c = 0; c < n; ++c) z[at((b * L + l) * n + c)] = dz[which]->at(b, c / D, l, c % D);
    const std::vector<double> zT = transposed(z, T_, n);
    int64_t ldc = 0;
    const std::vector<T> dW =
        Gemm<T>::run(std::vector<T>(zT.begin(), zT.end()), n, T_, transposed(x.to_double(), T_, nin), nin, ldc);
    const bool sep = m.packing == Packing::separate;
    Tensor& gw = g.at(sep ? (which == 0 ? "dwq" : which == 1 ? "dwk" : "dwv") : "dwqkv");
    for (int64_t c = 0; c < n; ++c)
      for (int64_t e = 0; e < nin; ++e)
        gw.set_offset((sep ? c : row[at(c)]) * nin + e, static_cast<double>(dW[at(c * ldc + e)]));
    if (m.qkv_bias) {
      Tensor& gb = g.at(sep ? (which == 0 ? "dbq" : which == 1 ? "dbk" : "dbv") : "dbqkv");
      for (int64_t c = 0; c < n; ++c) {
        T s = 0;
        for (int64_t t = 0; t < T_; ++t) s += static_cast<T>(z[at(t * n + c)]);
        gb.set_offset(sep ? c : row[at(c)], static_cast<double>(s));
      }
    }
    if (kv && !m.cross() && grad_fault_ == ModuleGradFault::x_kv_path) continue;
    int64_t ldx = 0;
    const std::vector<T> part =
        Gemm<T>::run(std::vector<T>(z.begin(), z.end()), T_, n, transposed(w, n, nin), nin, ldx);
    std::vector<T>& acc = kv && m.cross() ? dx2 : dx;
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t e = 0; e < nin; ++e) acc[at(t * nin + e)] += part[at(t * ldx + e)];
  }
  for (int64_t k = 0; k < in.x.numel(); ++k) g.at("dx").set_offset(k, static_cast<double>(dx[at(k)]));
  if (m.cross())
    for (int64_t k = 0; k < in.x2->numel(); ++k) g.at("dx2").set_offset(k, static_cast<double>(dx2[at(k)]));
}

}  // namespace

ModuleImplPtr make_cpu_module(ImplPtr attention, ModuleFault fault, ModuleGradFault grad_fault) {
  return std::make_shared<CpuModule>(std::move(attention), fault, grad_fault);
}

}  // namespace attncheck
