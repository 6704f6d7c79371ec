// BwdParams of a problem for the CUDA backward kernels: the forward's inputs (make_input_plan), its O and lse, dO,
// the gradient tensors and the workspaces, all in host memory (the device backend copies them).
#include "host_plan_backward.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "attncheck/features.hpp"
#include "attncheck/mods.hpp"

namespace attncheck::cuda {

namespace {
constexpr double kMaxDsWorkspace = 4.0 * 1024 * 1024 * 1024;

size_t acc_size(const Problem& p) { return p.dtype == DType::f64 ? sizeof(double) : sizeof(float); }

void expect(const Tensor& t, const char* name, DType dtype, const std::vector<int64_t>& shape) {
  if (t.dtype != dtype)
    throw std::invalid_argument(std::string("cuda backward: ") + name + " has dtype " + to_string(t.dtype) +
                                ", the kernels read " + to_string(dtype));
  if (t.shape != shape)
    throw std::invalid_argument(std::string("cuda backward: ") + name + " has shape " + shape_string(t.shape) +
                                ", expected " + shape_string(shape));
}
}  // namespace

Support backward_supports(const Problem& p) {
  if (Support s = kernel_supports(p); !s.ok) return s;
  if (Support s = backward_modelled(p); !s.ok) return s;
  if (p.mla)  // the kernels write dK and dV apart; the latent cache has one gradient (mla.hpp)
    return Support::no("backward of absorbed MLA (one latent-cache gradient) not implemented by the cuda kernels");
  if (uses_modifications(p))  // the reference has their gradients (backward.cpp); these kernels do not
    return Support::no("backward with score/mask modifications, RoPE or QK-norm not implemented by the cuda kernels");
  if (p.Dqk > kMaxHeadDim || p.Dv > kMaxHeadDim)
    return Support::no("head dim " + std::to_string(std::max(p.Dqk, p.Dv)) + " > " + std::to_string(kMaxHeadDim) +
                       " (the backward kernels' tiles)");
  if (p.bias_shape) {
    const double bytes = static_cast<double>(p.B) * static_cast<double>(p.Hq) * static_cast<double>(p.Lq) *
                         static_cast<double>(p.Lk) * static_cast<double>(acc_size(p));
    if (bytes > kMaxDsWorkspace)
      return Support::no("dBias needs a [B,Hq,Lq,Lk] dS workspace of " + std::to_string(bytes / (1 << 30)) +
                         " GiB (> 4 GiB)");
  }
  return Support::yes();
}

BwdPlan make_backward_plan(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout, Gradients& g) {
  if (Support s = backward_supports(p); !s.ok) throw std::invalid_argument("cuda backward: " + s.reason);
  if (!fwd.lse) throw std::invalid_argument("cuda backward: the forward's lse is missing (run it with want_lse)");
  const int64_t rows = p.B * p.Hq * p.Lq;
  expect(*fwd.lse, "lse", p.stat_dtype(), {p.B, p.Hq, p.Lq});
  if (fwd.lse->strides != std::vector<int64_t>{p.Hq * p.Lq, p.Lq, 1})
    throw std::invalid_argument("cuda backward: lse is not contiguous");
  expect(fwd.out, "out", p.dtype, {p.B, p.Hq, p.Lq, p.Dv});
  expect(dout, "dout", p.dtype, {p.B, p.Hq, p.Lq, p.Dv});
  expect(g.dq, "dq", p.dtype, grad_shape(p, 0));
  expect(g.dk, "dk", p.dtype, grad_shape(p, 1));
  expect(g.dv, "dv", p.dtype, grad_shape(p, 2));
  if (p.bias_shape && !g.dbias)
    throw std::invalid_argument("cuda backward: the problem has a bias but no dbias tensor");

  BwdPlan plan;
  plan.inputs = make_input_plan(p, in);
  BwdParams& bp = plan.params;
  bp.a = plan.inputs.params;
  // The kernels only read the forward's outputs; AttnParams keeps them as the (writable) pointers of the forward.
  bp.a.out = const_cast<uint8_t*>(fwd.out.bytes.data());
  copy_strides(bp.a.o_stride, fwd.out);
  bp.a.lse = const_cast<uint8_t*>(fwd.lse->bytes.data());
  bp.dout = dout.bytes.data();
  copy_strides(bp.do_stride, dout);
  bp.dq = g.dq.bytes.data();
  bp.dk = g.dk.bytes.data();
  bp.dv = g.dv.bytes.data();
  copy_strides(bp.dq_stride, g.dq);
  copy_strides(bp.dk_stride, g.dk);
  copy_strides(bp.dv_stride, g.dv);
  plan.d.assign(static_cast<size_t>(rows) * acc_size(p), 0);
  plan.live.assign(static_cast<size_t>(rows), 0);
  bp.d = plan.d.data();
  bp.live = plan.live.data();
  if (p.bias_shape) {
    plan.ds.assign(static_cast<size_t>(rows * p.Lk) * acc_size(p), 0);  // pairs without a gradient stay 0
    plan.dbias.assign(static_cast<size_t>(g.dbias->numel()) * acc_size(p), 0);
    bp.ds = plan.ds.data();
    bp.dbias = plan.dbias.data();
    for (int k = 0; k < 4; ++k) bp.bias_shape[k] = (*p.bias_shape)[static_cast<size_t>(k)];
  }
  return plan;
}

void store_dbias(const BwdPlan& plan, Gradients& g) {
  if (!g.dbias || plan.dbias.empty()) return;
  const bool wide = plan.inputs.elem == ElemType::f64;
  for (int64_t n = 0; n < g.dbias->numel(); ++n)
    g.dbias->set_offset(n, wide ? reinterpret_cast<const double*>(plan.dbias.data())[n]
                                : static_cast<double>(reinterpret_cast<const float*>(plan.dbias.data())[n]));
}

}  // namespace attncheck::cuda
