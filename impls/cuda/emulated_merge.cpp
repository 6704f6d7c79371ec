// The combine kernel (kernels/merge_states.cuh) on the host SIMT emulation: `cuda-emulated`'s merge entry.
// Every buffer the kernel reads or writes is registered with the launch, so an access outside them fails as
// out-of-bounds naming the buffer, the element and the thread.
#include <cmath>
#include <string>

#include "attncheck/run_failure.hpp"
#include "emulated.hpp"
#include "kernels/merge_states.cuh"

namespace attncheck::cuda {

Support merge_kernel_supports(const MergeProblem& p) {
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    return Support::no(std::string("merge of ") + to_string(p.dtype) + " states not supported (fp32, fp16, bf16)");
  if (p.conv.out_dtype)
    return Support::no(std::string("an ") + to_string(*p.conv.out_dtype) +
                       " merged output is not implemented in the combine kernel");
  if (p.D > kMergeMaxHeadDim)
    return Support::no("D = " + std::to_string(p.D) + " > " + std::to_string(kMergeMaxHeadDim) +
                       " (accumulators per lane)");
  if (p.B * p.H * p.L > int64_t(65535) * kMergeRowsPerBlock * 1024)
    return Support::no("B*H*L = " + std::to_string(p.B * p.H * p.L) + " rows exceed the kernel's one-dimensional grid");
  return Support::yes();
}

namespace {
template <size_t R>
void copy_merge_strides(int64_t (&dst)[R], const Tensor& t) {
  for (size_t k = 0; k < R; ++k) dst[k] = t.strides[k];
}
size_t optional_bytes(const std::optional<Tensor>& t) { return t ? t->bytes.size() : 0; }
}  // namespace

void run_merge_emulated(const MergeProblem& p, const StoredStates& in, StoredStates& out, emu::Order order) {
  if (Support s = merge_kernel_supports(p); !s.ok) throw std::invalid_argument("cuda merge: " + s.reason);
  const bool norm = p.conv.form == StateForm::normalised;
  const Tensor& xi = norm ? *in.lse : *in.max;
  Tensor& xo = norm ? *out.lse : *out.max;
  MergeParams m{};
  m.o_in = in.o.bytes.data(), m.x_in = xi.data<float>(), m.o_out = out.o.bytes.data(), m.x_out = xo.data<float>();
  copy_merge_strides(m.o_in_stride, in.o), copy_merge_strides(m.x_in_stride, xi),
      copy_merge_strides(m.o_out_stride, out.o), copy_merge_strides(m.x_out_stride, xo);
  if (!norm) {
    m.l_in = in.sum->data<float>(), m.l_out = out.sum->data<float>();
    copy_merge_strides(m.l_in_stride, *in.sum), copy_merge_strides(m.l_out_stride, *out.sum);
  }
  m.N = static_cast<int>(p.N), m.B = static_cast<int>(p.B), m.H = static_cast<int>(p.H);
  m.L = static_cast<int>(p.L), m.D = static_cast<int>(p.D);
  m.base_two = p.conv.base == LseBase::two;
  m.sentinel = static_cast<float>(empty_stat_value(p.conv));

  emu::LaunchConfig cfg;
  const int64_t rows = p.B * p.H * p.L;
  cfg.grid = dim3(static_cast<unsigned>((rows + kMergeRowsPerBlock - 1) / kMergeRowsPerBlock));
  cfg.block = dim3(32 * kMergeRowsPerBlock);
  cfg.order = order;
  cfg.globals = {{"o_in", m.o_in, in.o.bytes.size()},
                 {"x_in", m.x_in, xi.bytes.size()},
                 {"o_out", m.o_out, out.o.bytes.size()},
                 {"x_out", m.x_out, xo.bytes.size()}};
  if (!norm)
    cfg.globals.push_back({"l_in", m.l_in, optional_bytes(in.sum)}),
        cfg.globals.push_back({"l_out", m.l_out, optional_bytes(out.sum)});
  void (*kernel)(MergeParams) = p.dtype == DType::f16    ? &merge_states_kernel<__half>
                                : p.dtype == DType::bf16 ? &merge_states_kernel<__nv_bfloat16>
                                                         : &merge_states_kernel<float>;
  try {
    emu::launch(cfg, kernel, m);
  } catch (const emu::OutOfBounds& e) {
    throw RunFailure("out-of-bounds", std::string("emulated merge kernel: ") + e.what());
  }
}

}  // namespace attncheck::cuda
