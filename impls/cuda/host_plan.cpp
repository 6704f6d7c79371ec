// Capabilities of the CUDA kernels and the translation of a Problem into their AttnParams (host pointers).
#include "host_plan.hpp"

#include <cfloat>
#include <climits>
#include <cstring>
#include <cmath>
#include <stdexcept>
#include <string>

#include "attncheck/declarations.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/rope.hpp"

namespace attncheck::cuda {

Capabilities kernel_capabilities() {
  Capabilities c;
  c.dtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};  // fp32 accumulation (fp64 for fp64)
  c.max_head_dim = kMaxForwardHeadDim;
  c.mods = kernel_mods();
  c.max_logit_out = true;
  c.sinks = true;
  c.kv_quant = true;
  c.mla = true;
  c.notes =
      "kernel 1 (straightforward, serves weights output) and kernel 2 (fused flash, BR=4 rows, BC=32 keys, "
      "BC=16 above head dim 128, 8 above 256 up to 576; fp64: BC=32/16/8/2); fp32 accumulation, fp64 for fp64; no "
      "inline PTX "
      "(mma/ldmatrix/cp.async): the device "
      "runs the same scalar SIMT code that the host emulation runs";
  return c;
}

// The library entries whose arithmetic the kernels share with the reference (mod_eval.hpp, rope_eval.hpp). Not
// here: the user expressions (score_expr, mask_expr: muparser bytecode, host-only).
std::set<std::string> kernel_mods() {
  return {"alibi",     "t5_bias",        "key_bias", "document", "chunked",
          "prefix_lm", "dilated_window", "topk",     "rope",     "qk_norm"};
}

Declarations KernelImpl::declarations() const {
  Declarations d = Impl::declarations();
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    PrecisionContract c = default_contract(t);
    c.rope = RopeMath::fp32;
    d.contracts[t] = c;
  }
  return d;
}

Support kernel_supports(const Problem& p) {
  if (Support s = check_capabilities(kernel_capabilities(), p); !s.ok) return s;
  if (p.B * p.Hq > 65535)
    return Support::no("B*Hq = " + std::to_string(p.B * p.Hq) + " > 65535 (grid.y of the fused kernel)");
  if (p.kv_quantized() && p.kv_dtype != DType::i8 && !is_fp8(p.kv_dtype))
    return Support::no(std::string("kv_dtype ") + to_string(p.kv_dtype) +
                       ": the kernels decode one-byte codes (int8, fp8_e4m3, fp8_e5m2)");
  if (p.Lq > INT_MAX || p.Lk > INT_MAX) return Support::no("Lq or Lk > INT_MAX");
  if (p.dtype != DType::f64 && p.fill == MaskFill::finite && !(std::abs(p.fill_value) <= FLT_MAX))
    return Support::no("finite fill_value " + std::to_string(p.fill_value) + " is outside the fp32 range");
  return Support::yes();
}

KernelVersion default_version(const Problem& p) { return p.want_weights ? KernelVersion::naive : KernelVersion::flash; }

ElemType elem_type(DType t) {
  switch (t) {
    case DType::f32: return ElemType::f32;
    case DType::f16: return ElemType::f16;
    case DType::bf16: return ElemType::bf16;
    case DType::f64: return ElemType::f64;
    default: break;
  }
  throw std::invalid_argument(std::string("cuda: dtype ") + to_string(t) + " not supported (fp64, fp32, fp16, bf16)");
}

void copy_strides(int64_t* dst, const Tensor& t) {
  for (int k = 0; k < 4; ++k) dst[k] = t.strides[static_cast<size_t>(k)];
}

namespace {
// Element strides of a broadcast tensor: 0 along dims of extent 1, so the kernels index it with (b, h, i, j).
void broadcast_strides(int64_t* dst, const Tensor& t) {
  for (int k = 0; k < 4; ++k) dst[k] = t.shape[static_cast<size_t>(k)] == 1 ? 0 : t.strides[static_cast<size_t>(k)];
}
// The same for a row-major copy of a 4-d tensor of this shape (Tensor::to_double's order).
void row_major_broadcast_strides(int64_t* dst, const std::vector<int64_t>& shape) {
  int64_t stride = 1;
  for (int k = 3; k >= 0; --k) {
    const int64_t ext = shape[static_cast<size_t>(k)];
    dst[k] = ext == 1 ? 0 : stride;
    stride *= ext;
  }
}
}  // namespace

namespace {
// The modifications' parameters copied into the plan (the device backend uploads these vectors); an entry the
// problem does not use stays off (null pointer, size 0, window -1).
void set_mods(const Problem& p, HostPlan& plan) {
  AttnParams& a = plan.params;
  a.dilated_window = -1;
  a.dilation = 1;
  if (!uses_modifications(p)) return;
  if (!p.alibi_slopes.empty()) {
    plan.alibi_slopes = p.alibi_slopes;
    a.alibi_slopes = plan.alibi_slopes.data();
    a.alibi_per_batch = static_cast<int64_t>(p.alibi_slopes.size()) != p.Hq;
  }
  if (p.t5_buckets > 0) {
    plan.t5_table = p.t5_table;
    a.t5_table = plan.t5_table.data();
    a.t5_buckets = p.t5_buckets;
    a.t5_max_distance = p.t5_max_distance;
    a.t5_bidirectional = p.t5_bidirectional;
  }
  if (!p.key_bias.empty()) {
    plan.key_bias = p.key_bias;
    a.key_bias = plan.key_bias.data();
    a.key_bias_per_batch = static_cast<int64_t>(p.key_bias.size()) != p.Hq * p.Lk;
  }
  if (!p.doc_ids.empty()) {
    plan.doc_ids = p.doc_ids;
    a.doc_ids = plan.doc_ids.data();
  }
  a.chunk_size = p.chunk_size;
  if (!p.prefix_lengths.empty()) {
    plan.prefix_lengths = p.prefix_lengths;
    a.prefix_lengths = plan.prefix_lengths.data();
  }
  a.dilated_window = p.dilated_window;
  a.dilation = p.dilation;
  if (p.topk > 0) {
    plan.topk_indices = p.topk_indices;
    a.topk_indices = plan.topk_indices.data();
    a.topk = p.topk;
  }
}

// The position stage's parameters: the QK-norm weights, inv_freq computed once in fp64 (with its frequency
// scaling) and the position of every query and key, by the reference's own rules.
void set_position_stage(const Problem& p, HostPlan& plan) {
  AttnParams& a = plan.params;
  if (!p.q_norm_weight.empty()) plan.q_norm_weight = p.q_norm_weight, a.q_norm_weight = plan.q_norm_weight.data();
  if (!p.k_norm_weight.empty()) plan.k_norm_weight = p.k_norm_weight, a.k_norm_weight = plan.k_norm_weight.data();
  a.qk_norm_eps = p.qk_norm_eps;
  if (!uses_rope(p)) return;
  a.rotary_dim = p.rotary_dim;
  a.rotary_interleaved = p.rotary_interleaved;
  plan.rope_inv_freq = rope_inv_freq(p);
  a.rope_inv_freq = plan.rope_inv_freq.data();
  a.rope_factor = rope_attention_factor(p);
  const auto push = [](std::vector<int64_t>& table, const RopeAt& at) {
    table.insert(table.end(), at.pos.begin(), at.pos.begin() + at.n);
  };
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t i = 0; i < p.Lq; ++i) push(plan.rope_q_pos, rope_query_at(p, b, i));
    for (int64_t j = 0; j < p.Lk; ++j) push(plan.rope_k_pos, rope_key_at(p, b, j));
  }
  a.rope_q_pos = plan.rope_q_pos.data();
  a.rope_k_pos = plan.rope_k_pos.data();
  a.rope_sections = rope_query_at(p, 0, 0).n;
  if (!p.rope_mrope_section.empty())
    plan.rope_pair_section = rope_pair_sections(p), a.rope_pair_section = plan.rope_pair_section.data();
}

// A quantized cache's decoding: the value of every byte by the reference's own decoding (int8 two's complement,
// fp8_bits_to_double) and the scales in fp64 with broadcast strides (0 on the dims their granularity shares).
void set_kv_cache(const Problem& p, const Inputs& in, HostPlan& plan) {
  if (!p.kv_quantized()) return;
  AttnParams& a = plan.params;
  for (int x = 0; x < 256; ++x)
    plan.kv_code_values.push_back(p.kv_dtype == DType::i8 ? static_cast<double>(static_cast<int8_t>(x))
                                                          : fp8_bits_to_double(static_cast<uint8_t>(x), p.kv_dtype));
  a.kv_code_values = plan.kv_code_values.data();
  plan.k_scale = in.k_scale->to_double();
  plan.v_scale = in.v_scale->to_double();
  a.k_scale = plan.k_scale.data();
  a.v_scale = plan.v_scale.data();
  row_major_broadcast_strides(a.k_scale_stride, in.k_scale->shape);
  row_major_broadcast_strides(a.v_scale_stride, in.v_scale->shape);
  a.kv_block = p.kv_block;
}
}  // namespace

HostPlan make_input_plan(const Problem& p, const Inputs& in) {
  if (Support s = kernel_supports(p); !s.ok) throw std::invalid_argument("cuda: " + s.reason);
  HostPlan plan;
  plan.elem = elem_type(p.dtype);
  AttnParams& a = plan.params;
  // Absorbed MLA: v is a view of the latent cache k (its first Dv columns, k's strides), never Inputs::v's copy.
  const Tensor& v = p.mla ? in.k : in.v;
  a.q = in.q.bytes.data();
  a.k = in.k.bytes.data();
  a.v = v.bytes.data();
  plan.q_bytes = in.q.bytes.size();
  plan.k_bytes = in.k.bytes.size();
  plan.v_bytes = v.bytes.size();
  copy_strides(a.q_stride, in.q);
  copy_strides(a.k_stride, in.k);
  copy_strides(a.v_stride, v);
  const bool wide = p.dtype == DType::f64;
  a.B = static_cast<int>(p.B);
  a.Hq = static_cast<int>(p.Hq);
  a.Hkv = static_cast<int>(p.Hkv);
  a.Lq = static_cast<int>(p.Lq);
  a.Lk = static_cast<int>(p.Lk);
  a.Dqk = static_cast<int>(p.Dqk);
  a.Dv = static_cast<int>(p.Dv);
  a.scale = p.effective_scale();
  a.softcap = p.softcap;
  a.causal = p.causal;
  a.window_left = p.window_left;
  a.window_right = p.window_right;
  for (int64_t b = 0; b < p.B; ++b) {
    plan.diag_offset.push_back(p.diagonal_offset(b));
    plan.key_length.push_back(p.key_length(b));
  }
  a.diag_offset = plan.diag_offset.data();
  a.key_length = plan.key_length.data();
  if (in.mask) {
    a.mask = in.mask->data<unsigned char>();
    broadcast_strides(a.mask_stride, *in.mask);
    plan.mask_bytes = in.mask->bytes.size();
  }
  if (in.bias) {
    // Converted once on the host to the accumulation type (exact, except an fp64 bias of an fp32/fp16/bf16
    // problem, which rounds to fp32: one more rounding inside the score error of the tolerance model).
    const std::vector<double> values = in.bias->to_double();
    if (wide)
      plan.bias_f64 = values;
    else
      plan.bias_f32.assign(values.begin(), values.end());
    row_major_broadcast_strides(a.bias_stride, in.bias->shape);
    a.bias = plan.bias_data();
  }
  a.fill_finite = p.fill == MaskFill::finite;
  a.fill_value = p.fill_value;
  a.fully_masked = p.fully_masked == FullyMasked::nan    ? kFullyMaskedNan
                   : p.fully_masked == FullyMasked::zero ? kFullyMaskedZero
                                                         : kFullyMaskedUniform;
  if (in.keep) {
    a.keep = in.keep->data<unsigned char>();
    plan.keep_bytes = in.keep->bytes.size();
  }
  a.keep_scale = 1.0 / (1.0 - p.dropout_p);
  if (!p.sinks.empty()) {
    plan.sinks = p.sinks;
    a.sinks = plan.sinks.data();
  }
  set_mods(p, plan);
  set_position_stage(p, plan);
  set_kv_cache(p, in, plan);
  return plan;
}

HostPlan make_plan(const Problem& p, const Inputs& in, Outputs& out, KernelVersion v) {
  if (Support s = kernel_supports(p); !s.ok) throw std::invalid_argument("cuda: " + s.reason);
  if (p.want_weights && v != KernelVersion::naive)
    throw std::invalid_argument("cuda: the fused kernel 2 does not produce weights (want_weights = true)");
  HostPlan plan = make_input_plan(p, in);
  plan.version = v;
  AttnParams& a = plan.params;
  a.out = out.out.bytes.data();
  copy_strides(a.o_stride, out.out);
  // lse and weights are stat_dtype: fp64 for fp64 problems, fp32 otherwise -- the kernels' accumulation type.
  a.lse = out.lse ? out.lse->bytes.data() : nullptr;
  a.weights = out.weights ? out.weights->bytes.data() : nullptr;
  const size_t acc = p.dtype == DType::f64 ? sizeof(double) : sizeof(float);
  if (p.max_logit == MaxLogitOut::rows) {
    a.max_logit = out.max_logit->bytes.data();
    plan.max_logit_bytes = out.max_logit->bytes.size();
  } else if (p.max_logit == MaxLogitOut::heads) {
    plan.max_logit_rows.assign(static_cast<size_t>(p.B * p.Hq * p.Lq) * acc, 0);
    a.max_logit = plan.max_logit_rows.data();
    plan.max_logit_bytes = plan.max_logit_rows.size();
  }
  if (v == KernelVersion::naive && !a.weights) {
    plan.scratch.assign(static_cast<size_t>(p.B * p.Hq * p.Lq * p.Lk) * acc, 0);
    a.scratch = plan.scratch.data();
  }
  return plan;
}

void finish_max_logit(const Problem& p, const HostPlan& plan, Outputs& out) {
  if (p.max_logit != MaxLogitOut::heads) return;
  const size_t n = static_cast<size_t>(p.B * p.Hq * p.Lq);
  std::vector<double> rows(n);
  for (size_t r = 0; r < n; ++r) {
    if (p.dtype == DType::f64) {
      double x;
      std::memcpy(&x, plan.max_logit_rows.data() + r * sizeof x, sizeof x);
      rows[r] = x;
    } else {
      float x;
      std::memcpy(&x, plan.max_logit_rows.data() + r * sizeof x, sizeof x);
      rows[r] = x;
    }
  }
  const std::vector<double> heads = max_logit_heads(p, rows);
  for (size_t h = 0; h < heads.size(); ++h) out.max_logit->set_offset(static_cast<int64_t>(h), heads[h]);
}

}  // namespace attncheck::cuda
