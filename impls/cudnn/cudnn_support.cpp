// The mapping of the problem model onto cuDNN 9's SDPA graph, as capability flags and per-case checks.
// Each "no" names what cuDNN's graph cannot express or does not document, so `verify` reports it as unsupported
// instead of running something that only approximates the case.
#include "cudnn_support.hpp"

namespace attncheck::cudnn {

Capabilities cudnn_capabilities() {
  Capabilities c;
  // fp16/bf16 are the fused engines' native types; fp32 I/O is accepted by cuDNN's runtime-compiled engine
  // (heuristics and plan compilation succeed for sm_80 and sm_90), which reports tensor-core math.
  c.dtypes = {DType::f32, DType::f16, DType::bf16};
  c.layouts = {Layout::BHSD, Layout::BSHD};  // through strides; the head dim must be innermost
  c.gqa = true;                              // K and V with Hkv heads, Hq % Hkv == 0
  c.cross = true;
  c.dqk_ne_dv = true;
  c.causal = true;
  c.alignments = {Alignment::top_left, Alignment::bottom_right};  // cuDNN has no explicit diagonal offset
  c.per_batch_offsets = false;
  c.key_padding = true;  // padding mask with per-batch seq_len_kv (seq_len_q = Lq)
  c.bool_mask = false;   // no boolean mask input in the SDPA graph; an additive bias can carry one
  c.bias = true;
  c.window = false;       // cuDNN's diagonal band is not mapped onto the problem's window here
  c.logit.clear();        // a tanh score modifier is not combinable with cuDNN's masks
  c.dropout = true;       // cuDNN's custom dropout: P * scale * mask with the caller's keep-mask (sm_80, sm_90)
  c.finite_fill = false;  // masked scores are -inf in cuDNN's graph; no user fill value
  // Rows with no visible key by masks are rejected in cudnn_supports; rows that a -inf bias masks fully come out 0
  // (measured on an H200 with cuDNN 9.19, docs/gpu.md), so zero is the one policy cuDNN follows.
  c.fully_masked = {FullyMasked::zero};
  c.weights_out = false;  // the fused engines never materialise P
  c.lse_out = true;       // softmax stats: max + log(sum exp), fp32 [B, Hq, Lq, 1]
  c.fp8 = false;  // cuDNN's sdpa_fp8 (SM90+, head dims % 16, fp8 O with scale_o) is not built here: docs/cudnn.md
  // No library modification is built into the graph (c.mods stays empty). What cuDNN could express, unbuilt and
  // untested here: set_alibi_mask is ALiBi with cuDNN's own slopes 2^(-8(h+1)/H), so `alibi` only for those slopes;
  // set_score_mod (frontend >= 1.9) takes a chain of pointwise operations on the score tile with the row and column
  // index, enough for the index-arithmetic masks (`chunked`, `prefix_lm`, `dilated_window`) and for `alibi` with
  // any slopes as a broadcast operand; the per-token tables (`document`, `topk`, the `t5_bias` buckets) would need a
  // gather, which its pointwise set does not have as far as we know. The max-logit output is not built either.
  c.max_head_dim = 256;
  c.head_dim_multiple = 8;
  c.notes = "cuDNN 9 graph API; rows with no visible key, bottom-right causal with bias or dropout unsupported";
  return c;
}

Support cudnn_supports(const Problem& p) {
  if (Support s = check_capabilities(cudnn_capabilities(), p); !s.ok) return s;
  if (p.bias_shape && p.bias_dtype != DType::f16 && p.bias_dtype != DType::bf16 && p.bias_dtype != DType::f32)
    return Support::no(std::string("bias dtype ") + to_string(p.bias_dtype) + " not supported (fp16, bf16, fp32)");
  // cuDNN documents bottom-right causal masking only without bias, dropout and alibi.
  if (p.causal && p.alignment == Alignment::bottom_right && p.bias_shape)
    return Support::no("bottom-right causal mask with additive bias not supported by cuDNN");
  if (p.causal && p.alignment == Alignment::bottom_right && p.dropout_p > 0)
    return Support::no("bottom-right causal mask with dropout not supported by cuDNN");
  // A row sees no key when its batch has no valid key, or when bottom-right alignment puts the diagonal left of
  // the first key (Lk_b < Lq). cuDNN documents neither the output nor the stats of such rows.
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t lk = p.key_length(b);
    if (lk == 0) return Support::no("batch " + std::to_string(b) + " has no valid key (key_lengths[b] = 0)");
    if (p.causal && p.alignment == Alignment::bottom_right && lk < p.Lq)
      return Support::no("bottom-right causal with key length " + std::to_string(lk) + " < Lq " + std::to_string(p.Lq) +
                         " leaves rows with no visible key (batch " + std::to_string(b) + ")");
  }
  return Support::yes();
}

Support cudnn_supports_backward(const Problem& p) {
  if (Support s = cudnn_supports(p); !s.ok) return s;
  if (p.dtype == DType::f32)  // heuristics propose none for sm_80 or sm_90 (CudnnBackwardGraphNegative)
    return Support::no("cuDNN SDPA backward: no backward engine for fp32 I/O (fp16, bf16 only)");
  if (p.Dqk > 128 || p.Dv > 128)
    return Support::no("cuDNN SDPA backward: head dims above 128 (Dqk " + std::to_string(p.Dqk) + ", Dv " +
                       std::to_string(p.Dv) + ") only on sm_90, and the device is not known before the run");
  if (p.Lq == 1 && p.Lk == 1) return Support::no("cuDNN SDPA backward: Lq = Lk = 1 not supported");
  if (p.bias_shape) {
    const auto& bs = *p.bias_shape;
    if ((bs[0] != 1 && p.B != 1) || bs[1] != p.Hq || bs[2] != p.Lq || bs[3] != p.Lk)
      return Support::no("cuDNN SDPA backward: dBias only as [1, Hq, Lq, Lk], the bias is [" + std::to_string(bs[0]) +
                         "," + std::to_string(bs[1]) + "," + std::to_string(bs[2]) + "," + std::to_string(bs[3]) + "]");
  }
  return Support::yes();
}

Support measured_wrong(const Problem& p, bool backward) {
  if (p.dtype == DType::f32 && p.dropout_p > 0)
    return Support::no("fp32 I/O with dropout: measured NaN output on a device (cuDNN 9.19, docs/gpu.md)");
  if (p.dtype == DType::f32 && (p.Dqk > 128 || p.Dv > 128))
    return Support::no(
        "fp32 I/O with head dims above 128: measured output off by 1e7 tolerances on a device (cuDNN "
        "9.19, docs/gpu.md)");
  if (backward && p.dropout_p > 0)  // the forward with the same keep-mask passes; the gradients do not
    return Support::no(
        "backward with dropout: measured dQ, dK outside tolerance on a device (fp16 err/tol 22.9, "
        "bf16 3.66; cuDNN 9.19, docs/gpu.md)");
  return Support::yes();
}

}  // namespace attncheck::cudnn
