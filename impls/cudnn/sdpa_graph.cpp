// Builds the SDPA forward operation graph with cuDNN's backend descriptors (see sdpa_graph.hpp for the shape of
// the graph; the backward pass is in sdpa_graph_backward.cpp). Tensor shapes in comments are logical [B, H, L, D]; K
// enters the first matmul transposed, as [B, Hkv, Dqk, Lk], which is only a swap of its last two dims and strides.
#include "graph_builder.hpp"

#include <cstring>
#include <limits>
#include <stdexcept>

namespace attncheck::cudnn {

SdpaStrides SdpaStrides::from_layout(const Problem& p) {
  auto strides = [&](int64_t H, int64_t L, int64_t D) -> std::vector<int64_t> {
    if (p.layout == Layout::BHSD) return {H * L * D, L * D, D, 1};
    return {L * H * D, D, H * D, 1};  // BSHD: [B, L, H, D] in memory
  };
  return {strides(p.Hq, p.Lq, p.Dqk), strides(p.Hkv, p.Lk, p.Dqk), strides(p.Hkv, p.Lk, p.Dv),
          strides(p.Hq, p.Lq, p.Dv)};
}

SdpaInputs sdpa_inputs(GraphBuilder& gb, const Problem& p, SdpaUids& uids) {
  const int64_t B = p.B, Hq = p.Hq, Hkv = p.Hkv, Lq = p.Lq, Lk = p.Lk;
  const cudnnDataType_t io = to_cudnn(p.dtype), i32 = CUDNN_DATA_INT32;
  gb.set_score_shape(B, Hq, Lq, Lk);
  const SdpaStrides st = SdpaStrides::from_layout(p);
  SdpaInputs in;
  // K as Kᵀ: [B, Hkv, Dqk, Lk].
  in.q = &gb.tensor("Q", io, {B, Hq, Lq, p.Dqk}, st.q, false);
  in.kt = &gb.tensor("K^T", io, {B, Hkv, p.Dqk, Lk}, {st.k[0], st.k[1], st.k[3], st.k[2]}, false);
  uids.q = gb.uid_of(*in.q), uids.k = gb.uid_of(*in.kt);
  // Key padding is cuDNN's padding mask with per-batch lengths; every query row of our model is valid.
  if (!p.key_lengths.empty()) {
    in.seq_q = &gb.tensor("seq_len_q", i32, {B, 1, 1, 1}, {1, 1, 1, 1}, false);
    in.seq_kv = &gb.tensor("seq_len_kv", i32, {B, 1, 1, 1}, {1, 1, 1, 1}, false);
    uids.seq_q = gb.uid_of(*in.seq_q), uids.seq_kv = gb.uid_of(*in.seq_kv);
  }
  in.scale = &gb.scalar("scale", CUDNN_DATA_FLOAT, static_cast<float>(p.effective_scale()));
  return in;
}

const Desc* scaled_scores(GraphBuilder& gb, const Problem& p, const SdpaInputs& in, SdpaUids& uids) {
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const bool padded = in.seq_kv != nullptr;
  const Desc* s = &gb.matmul(*in.q, *in.kt, gb.scores("S", f32), in.seq_q, in.seq_kv, nullptr, padded);
  s = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *s, in.scale, gb.scores("S*scale", f32));
  if (p.bias_shape) {
    const auto& bs = *p.bias_shape;
    const Tensor layout(p.bias_dtype, {bs[0], bs[1], bs[2], bs[3]});  // contiguous strides of the bias shape
    const Desc& bias = gb.tensor("bias", to_cudnn(p.bias_dtype), layout.shape, layout.strides, false);
    uids.bias = gb.uid_of(bias);
    s = &gb.pointwise(CUDNN_POINTWISE_ADD, f32, *s, &bias, gb.scores("S+bias", f32));
  }
  return s;
}

const Desc* padding_mask(GraphBuilder& gb, const SdpaInputs& in, const Desc* s) {
  if (!in.seq_kv) return s;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, boolean = CUDNN_DATA_BOOLEAN;
  // keep (row < seq_q[b]) && (col < seq_kv[b]); -inf elsewhere
  const Desc& row = gb.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, *s, nullptr, gb.scores("pad row", i32), nullptr, 2);
  const Desc& col = gb.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, *s, nullptr, gb.scores("pad col", i32), nullptr, 3);
  const Desc& row_ok = gb.pointwise(CUDNN_POINTWISE_CMP_LT, boolean, row, in.seq_q, gb.scores("row<seq_q", boolean));
  const Desc& col_ok = gb.pointwise(CUDNN_POINTWISE_CMP_LT, boolean, col, in.seq_kv, gb.scores("col<seq_kv", boolean));
  const Desc& keep =
      gb.pointwise(CUDNN_POINTWISE_LOGICAL_AND, boolean, row_ok, &col_ok, gb.scores("pad keep", boolean));
  const Desc& fill = gb.scalar("padding fill", f32, -std::numeric_limits<float>::infinity());
  return &gb.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, *s, &fill, gb.scores("S padded", f32), &keep);
}

const Desc* causal_mask(GraphBuilder& gb, const Problem& p, const SdpaInputs& in, const Desc* s) {
  if (!p.causal) return s;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, boolean = CUDNN_DATA_BOOLEAN;
  // keep col <= row + offset: top-left offset 0, bottom-right offset seq_kv[b] - seq_q[b]
  const Desc* row =
      &gb.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, *s, nullptr, gb.scores("causal row", i32), nullptr, 2);
  if (p.alignment == Alignment::bottom_right) {
    const Desc& kv = in.seq_kv ? *in.seq_kv : gb.scalar("Lk", i32, static_cast<int32_t>(p.Lk));
    const Desc& qq = in.seq_q ? *in.seq_q : gb.scalar("Lq", i32, static_cast<int32_t>(p.Lq));
    row = &gb.pointwise(CUDNN_POINTWISE_ADD, i32, *row, &kv, gb.scores("row+seq_kv", i32));
    row = &gb.pointwise(CUDNN_POINTWISE_SUB, i32, *row, &qq, gb.scores("row+seq_kv-seq_q", i32));
  }
  const Desc& col = gb.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, *s, nullptr, gb.scores("causal col", i32), nullptr, 3);
  const Desc& keep = gb.pointwise(CUDNN_POINTWISE_CMP_GE, boolean, *row, &col, gb.scores("row>=col", boolean));
  const Desc& fill = gb.scalar("causal fill", f32, -std::numeric_limits<float>::infinity());
  return &gb.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, *s, &fill, gb.scores("S causal", f32), &keep);
}

void build_forward(GraphBuilder& gb, const Problem& p, SdpaUids& uids) {
  const int64_t B = p.B, Hq = p.Hq, Hkv = p.Hkv, Lq = p.Lq, Lk = p.Lk;
  const cudnnDataType_t io = to_cudnn(p.dtype), f32 = CUDNN_DATA_FLOAT;
  const SdpaStrides st = SdpaStrides::from_layout(p);
  const SdpaInputs in = sdpa_inputs(gb, p, uids);
  const Desc& v = gb.tensor("V", io, {B, Hkv, Lk, p.Dv}, st.v, false);
  uids.v = gb.uid_of(v);

  // S = Q·Kᵀ·scale [+ bias] [B, Hq, Lq, Lk], fp32, masked.
  const Desc* s = causal_mask(gb, p, in, padding_mask(gb, in, scaled_scores(gb, p, in, uids)));

  // Softmax along keys, in the max/sub/exp/sum/div form; stats = max + log(sum) is the natural-log lse.
  const Desc& m = gb.reduction(CUDNN_REDUCE_TENSOR_MAX, *s, gb.rows("row max", true));
  const Desc& shifted = gb.pointwise(CUDNN_POINTWISE_SUB, f32, *s, &m, gb.scores("S-max", f32));
  const Desc& e = gb.pointwise(CUDNN_POINTWISE_EXP, f32, shifted, nullptr, gb.scores("exp(S-max)", f32));
  const Desc& z = gb.reduction(CUDNN_REDUCE_TENSOR_ADD, e, gb.rows("row sum", true));
  const Desc& log_z = gb.pointwise(CUDNN_POINTWISE_LOG, f32, z, nullptr, gb.rows("log sum", true));
  const Desc& stats = gb.pointwise(CUDNN_POINTWISE_ADD, f32, m, &log_z, gb.rows("stats", !p.want_lse));
  if (p.want_lse) uids.stats = gb.uid_of(stats);
  // The tensor that feeds the second matmul is in the I/O type, as cuDNN's fused engines expect.
  const bool dropout = p.dropout_p > 0;
  const Desc* prob = &gb.pointwise(CUDNN_POINTWISE_DIV, f32, e, &z, gb.scores("P", dropout ? f32 : io));
  if (dropout) {  // cuDNN's custom dropout: P * 1/(1-p) * keep, with the caller's keep-mask in the I/O type
    const Desc& keep_scale = gb.scalar("dropout scale", f32, static_cast<float>(1.0 / (1.0 - p.dropout_p)));
    const Desc& keep = gb.tensor("keep", io, {B, Hq, Lq, Lk}, {Hq * Lq * Lk, Lq * Lk, Lk, 1}, false);
    uids.keep = gb.uid_of(keep);
    prob = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *prob, &keep_scale, gb.scores("P/(1-p)", f32));
    prob = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *prob, &keep, gb.scores("P dropped", io));
  }

  // O = P·V [B, Hq, Lq, Dv].
  const Desc& o = gb.tensor("O", io, {B, Hq, Lq, p.Dv}, st.o, false);
  uids.o = gb.uid_of(o);
  gb.matmul(*prob, v, o, in.seq_q, nullptr, in.seq_kv, false);
}

SdpaGraph::SdpaGraph(const Problem& p, Pass pass) {
  GraphBuilder gb(*this);
  if (pass == Pass::backward)
    build_backward(gb, p, uids_);
  else
    build_forward(gb, p, uids_);
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Desc& op : ops_) raw.push_back(op.get());
  graph_ = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
                (pass == Pass::backward ? "backward operation graph " : "operation graph ") + p.name());
  graph_.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()), raw.data())
      .finalize();
}

}  // namespace attncheck::cudnn
