// Builds the SDPA backward operation graph: the composite form that cudnn-frontend's SDPA backward lowers to and
// cuDNN's fused flash-attention backward engines recognise (docs/cudnn.md, "Backward"). Tensor shapes in comments
// are logical [B, H, L, D]; Kᵀ and Vᵀ enter as swaps of their last two dims and strides, transposed score
// matrices as reshapes with swapped strides.
#include "graph_builder.hpp"

namespace attncheck::cudnn {

void build_backward(GraphBuilder& gb, const Problem& p, SdpaUids& uids) {
  const int64_t B = p.B, Hq = p.Hq, Hkv = p.Hkv, Lq = p.Lq, Lk = p.Lk, Dqk = p.Dqk, Dv = p.Dv;
  const cudnnDataType_t io = to_cudnn(p.dtype), f32 = CUDNN_DATA_FLOAT;
  const SdpaStrides st = SdpaStrides::from_layout(p);
  const SdpaInputs in = sdpa_inputs(gb, p, uids);
  const bool dropout = p.dropout_p > 0, gqa = Hq != Hkv;

  // Inputs besides Q and Kᵀ: Vᵀ [B, Hkv, Dv, Lk], the forward's O and stats, dO.
  const Desc& vt = gb.tensor("V^T", io, {B, Hkv, Dv, Lk}, {st.v[0], st.v[1], st.v[3], st.v[2]}, false);
  const Desc& o = gb.tensor("O", io, {B, Hq, Lq, Dv}, st.o, false);
  const Desc& d_o = gb.tensor("dO", io, {B, Hq, Lq, Dv}, st.o, false);
  const Desc& stats = gb.rows("stats", false);
  uids.v = gb.uid_of(vt), uids.o = gb.uid_of(o), uids.d_o = gb.uid_of(d_o), uids.stats = gb.uid_of(stats);
  const Desc* keep = nullptr;
  const Desc* keep_scale = nullptr;
  if (dropout) {  // the forward's keep-mask (0/1 in the I/O type) and 1/(1-p), as in the forward graph
    keep = &gb.tensor("keep", io, {B, Hq, Lq, Lk}, {Hq * Lq * Lk, Lq * Lk, Lk, 1}, false);
    keep_scale = &gb.scalar("dropout scale", f32, static_cast<float>(1.0 / (1.0 - p.dropout_p)));
    uids.keep = gb.uid_of(*keep);
  }

  // softmax_sum = (1-p) · rowsum(dO∘O) [B, Hq, Lq, 1], fp32, a work tensor of the graph: with dO·Vᵀ taken before
  // the 1/(1-p) of dropout, dS = P (dP·keep - softmax_sum) / (1-p) = P (dP' - D) of docs/backward.md.
  const Desc& do_o = gb.pointwise(CUDNN_POINTWISE_MUL, f32, d_o, &o, gb.packed("dO*O", f32, {B, Hq, Lq, Dv}, true));
  const Desc& row_sum = gb.reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, gb.rows("rowsum(dO*O)", true));
  const Desc& keep_inv = gb.scalar("1-p", f32, static_cast<float>(1.0 - p.dropout_p));
  const Desc& softmax_sum = gb.pointwise(CUDNN_POINTWISE_MUL, f32, row_sum, &keep_inv, gb.rows("softmax_sum", false));
  uids.softmax_sum = gb.uid_of(softmax_sum);

  // P = exp(S - stats) with S recomputed: scale, bias and masks as in the forward (padding before, causal after
  // the subtraction, as cudnn-frontend orders them).
  const Desc* s = padding_mask(gb, in, scaled_scores(gb, p, in, uids));
  s = &gb.pointwise(CUDNN_POINTWISE_SUB, f32, *s, &stats, gb.scores("S-stats", f32));
  s = causal_mask(gb, p, in, s);
  const Desc& prob = gb.pointwise(CUDNN_POINTWISE_EXP, f32, *s, nullptr, gb.scores("P", f32));

  // dV = P'ᵀ·dO, P' = P·keep/(1-p); Pᵀ in the I/O type [B, Hq, Lk, Lq]. GQA: per query head, then summed over
  // the group by a reduction onto [B, Hkv, Lk, Dv].
  const Desc* pk = &prob;
  if (dropout) {
    pk = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *pk, keep, gb.scores("P*keep", f32));
    pk = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *pk, keep_scale, gb.scores("P*keep/(1-p)", f32));
  }
  const std::vector<int64_t> transposed = {Hq * Lq * Lk, Lq * Lk, 1, Lk};
  const Desc& pt = gb.reshape(*pk, gb.tensor("P'^T", io, {B, Hq, Lk, Lq}, transposed, true));
  const Desc& dv = gb.tensor("dV", io, {B, Hkv, Lk, Dv}, st.v, false);
  uids.dv = gb.uid_of(dv);
  if (gqa) {
    const Desc& dv_full = gb.matmul(pt, d_o, gb.packed("dV per query head", io, {B, Hq, Lk, Dv}, true), in.seq_kv,
                                    nullptr, in.seq_q, false);
    gb.reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
  } else {
    gb.matmul(pt, d_o, dv, in.seq_kv, nullptr, in.seq_q, false);
  }

  // dS = P (dP·keep - softmax_sum) / (1-p), dP = dO·Vᵀ [B, Hq, Lq, Lk] fp32.
  const Desc* ds = &gb.matmul(d_o, vt, gb.scores("dP", f32), in.seq_q, in.seq_kv, nullptr, false);
  if (dropout) ds = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *ds, keep, gb.scores("dP*keep", f32));
  ds = &gb.pointwise(CUDNN_POINTWISE_SUB, f32, *ds, &softmax_sum, gb.scores("dP-softmax_sum", f32));
  ds = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *ds, &prob, gb.scores("dS", f32));
  if (dropout) ds = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *ds, keep_scale, gb.scores("dS/(1-p)", f32));
  if (p.bias_shape) {  // dBias = Σ_b dS onto [1, Hq, Lq, Lk] (the only dBias shape cuDNN produces)
    const Desc& dbias = gb.packed("dBias", to_cudnn(p.bias_dtype), {1, Hq, Lq, Lk}, false);
    uids.dbias = gb.uid_of(dbias);
    gb.reduction(CUDNN_REDUCE_TENSOR_ADD, *ds, dbias);
  }
  ds = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *ds, in.scale, gb.scores("scale*dS", f32));

  // dK = (scale·dS)ᵀ·Q, in the I/O type; GQA as for dV.
  const Desc& dst = gb.reshape(*ds, gb.tensor("(scale*dS)^T", io, {B, Hq, Lk, Lq}, transposed, true));
  const Desc& dk = gb.tensor("dK", io, {B, Hkv, Lk, Dqk}, st.k, false);
  uids.dk = gb.uid_of(dk);
  if (gqa) {
    const Desc& dk_full = gb.matmul(dst, *in.q, gb.packed("dK per query head", io, {B, Hq, Lk, Dqk}, true), in.seq_kv,
                                    nullptr, in.seq_q, false);
    gb.reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
  } else {
    gb.matmul(dst, *in.q, dk, in.seq_kv, nullptr, in.seq_q, false);
  }

  // dQ = (scale·dS)·K, K = Kᵀ reshaped back. Without dBias cudnn-frontend accumulates into an fp32 tensor and
  // copies it to dQ (the engines' non-workspace form); with dBias the product goes to dQ directly.
  const Desc& k = gb.reshape(*in.kt, gb.tensor("K", io, {B, Hkv, Lk, Dqk}, st.k, true));
  const Desc& dq = gb.tensor("dQ", io, {B, Hq, Lq, Dqk}, st.q, false);
  uids.dq = gb.uid_of(dq);
  if (p.bias_shape) {
    gb.matmul(*ds, k, dq, in.seq_q, nullptr, in.seq_kv, false);
  } else {
    const Desc& acc = gb.packed("dQ accumulator", f32, {B, Hq, Lq, Dqk}, false);
    uids.dq_accum = gb.uid_of(acc);
    gb.matmul(*ds, k, acc, in.seq_q, nullptr, in.seq_kv, false);
    gb.pointwise(CUDNN_POINTWISE_IDENTITY, f32, acc, nullptr, dq);
  }
}

}  // namespace attncheck::cudnn
