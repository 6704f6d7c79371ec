// Host side shared by the device backend (`cuda`) and the emulated one (`cuda-emulated`): what the kernels
// support, which kernel a problem gets, and the AttnParams of a problem with pointers into host memory
// (the emulation uses them as they are; the device backend copies each buffer and swaps the pointer).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "kernels/dispatch.cuh"

namespace attncheck::cuda {

// What both CUDA backends support (the kernels are the same source).
Capabilities kernel_capabilities();
// Limits that capability flags cannot express (grid size, fp32 range of the fill value).
Support kernel_supports(const Problem& p);
// Kernel 1 materialises the weights, so it serves want_weights; everything else runs the fused kernel 2.
KernelVersion default_version(const Problem& p);
ElemType elem_type(DType t);

struct HostPlan {
  AttnParams params{};
  ElemType elem = ElemType::f32;
  KernelVersion version = KernelVersion::flash;
  std::vector<int64_t> diag_offset, key_length;  // [B]
  std::vector<float> bias_f32;                   // the bias in the accumulation type (fp64 problems: bias_f64),
  std::vector<double> bias_f64;                  //   row-major over its broadcast shape
  std::vector<unsigned char> scratch;            // kernel 1's score workspace when weights are not requested
  size_t mask_bytes = 0, keep_bytes = 0;         // extents of the u8 buffers, for device copies
  size_t q_bytes = 0, k_bytes = 0, v_bytes = 0;  // extents of the inputs, for the emulation's bounds checks
  // The library modifications' parameters (mod buffers: the kernels read them through AttnParams).
  std::vector<double> alibi_slopes, t5_table, key_bias;
  std::vector<int64_t> doc_ids, prefix_lengths, topk_indices;
  // The position stage: QK-norm weights, RoPE's scaled inv_freq and every query's and key's position.
  std::vector<double> q_norm_weight, k_norm_weight, rope_inv_freq;
  std::vector<int64_t> rope_q_pos, rope_k_pos;  // [B, L, sections]
  std::vector<int> rope_pair_section;
  // A quantized KV cache: each byte's value and the scales widened to fp64 (exact), row-major over their shapes.
  std::vector<double> kv_code_values, k_scale, v_scale;
  std::vector<double> sinks;  // [Hq] sink logits
  // The max-logit rows [B, Hq, Lq] the kernels write: out.max_logit's bytes (rows form), or this buffer, reduced
  // per head by finish_max_logit (heads form).
  std::vector<unsigned char> max_logit_rows;
  size_t max_logit_bytes = 0;
  size_t bias_bytes() const { return bias_f32.size() * sizeof(float) + bias_f64.size() * sizeof(double); }
  const void* bias_data() const {
    return bias_f64.empty() ? static_cast<const void*>(bias_f32.data()) : bias_f64.data();
  }
};

// Params pointing into `in` only (q, k, v, masks, bias, dropout, per-batch offsets); out, lse, weights, scratch
// unset. Throws std::invalid_argument when the problem is not supported (kernel_supports).
HostPlan make_input_plan(const Problem& p, const Inputs& in);
// The element strides of a 4-d tensor into AttnParams' stride arrays.
void copy_strides(int64_t* dst, const Tensor& t);

// Both backends' base: the kernels' declarations, the default contracts with fp32 RoPE angles below fp64
// (rope=fp32-angles). Defined in host_plan.cpp: device.cu (nvcc) sees Declarations only by name.
class KernelImpl : public Impl {
 public:
  Declarations declarations() const override;
};

// The modifications a kernel evaluates (kernel_capabilities().mods), as names of the library (mods.hpp).
std::set<std::string> kernel_mods();

// Params pointing into `in` and `out` (which must come from make_outputs(p)). Throws std::invalid_argument when
// the problem is not supported (kernel_supports) or when `v` cannot produce a requested output.
HostPlan make_plan(const Problem& p, const Inputs& in, Outputs& out, KernelVersion v);
// After the launch: the heads form of the max-logit output as the maximum of the rows the kernel wrote.
void finish_max_logit(const Problem& p, const HostPlan& plan, Outputs& out);

}  // namespace attncheck::cuda
