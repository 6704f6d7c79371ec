// Builds the SDPA forward operation graph with cuDNN's backend descriptors (see sdpa_graph.hpp for the shape of
// the graph). Tensor shapes in comments are logical [B, H, L, D]; K enters the first matmul transposed, as
// [B, Hkv, Dqk, Lk], which is only a swap of its last two dims and strides.
#include "sdpa_graph.hpp"

#include <cstring>
#include <limits>
#include <stdexcept>

namespace attncheck::cudnn {
namespace {

cudnnDataType_t to_cudnn(DType t) {
  switch (t) {
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f32: return CUDNN_DATA_FLOAT;
    default: throw std::invalid_argument(std::string("cudnn: no cuDNN data type for ") + to_string(t));
  }
}

}  // namespace

SdpaStrides SdpaStrides::from_layout(const Problem& p) {
  auto strides = [&](int64_t H, int64_t L, int64_t D) -> std::vector<int64_t> {
    if (p.layout == Layout::BHSD) return {H * L * D, L * D, D, 1};
    return {L * H * D, D, H * D, 1};  // BSHD: [B, L, H, D] in memory
  };
  return {strides(p.Hq, p.Lq, p.Dqk), strides(p.Hkv, p.Lk, p.Dqk), strides(p.Hkv, p.Lk, p.Dv),
          strides(p.Hq, p.Lq, p.Dv)};
}

// Appends tensors and operations to an SdpaGraph; every helper returns the tensor it created.
class GraphBuilder {
 public:
  explicit GraphBuilder(SdpaGraph& g) : g_(g) {}

  const Desc& tensor(const std::string& name, cudnnDataType_t dt, const std::vector<int64_t>& dims,
                     const std::vector<int64_t>& strides, bool is_virtual) {
    Desc& t = g_.tensors_.emplace_back(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor " + name);
    const int64_t uid = next_uid_++;
    t.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, dt)
        .set_i64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
        .set_i64s(CUDNN_ATTR_TENSOR_STRIDES, strides)
        .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
        .set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, is_virtual)
        .finalize();
    if (!is_virtual) {
      int64_t last = 0;  // offset of the last element, in elements
      for (size_t d = 0; d < dims.size(); ++d) last += (dims[d] - 1) * strides[d];
      g_.device_tensors_.push_back({uid, name, (last + 1) * element_bytes(dt)});
    }
    return t;
  }
  static int64_t element_bytes(cudnnDataType_t dt) {
    switch (dt) {
      case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16: return 2;
      case CUDNN_DATA_FLOAT: case CUDNN_DATA_INT32: return 4;
      default: throw std::invalid_argument("cudnn: no element size for cuDNN data type " + std::to_string(dt));
    }
  }
  int64_t uid_of(const Desc& t) const {
    int64_t uid = 0, n = 0;
    check(cudnnBackendGetAttribute(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &n, &uid), t.name());
    return uid;
  }
  // A [1,1,1,1] pass-by-value scalar; its value travels in the variant pack from host memory.
  template <class T>
  const Desc& scalar(const std::string& name, cudnnDataType_t dt, T value) {
    static_assert(sizeof(T) <= 8);
    Desc& t = g_.tensors_.emplace_back(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "scalar " + name);
    const int64_t uid = next_uid_++;
    t.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, dt)
        .set_i64s(CUDNN_ATTR_TENSOR_DIMENSIONS, {1, 1, 1, 1})
        .set_i64s(CUDNN_ATTR_TENSOR_STRIDES, {1, 1, 1, 1})
        .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
        .set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, false)
        .set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true)
        .finalize();
    SdpaGraph::Scalar& s = g_.scalars_.emplace_back();
    s.uid = uid;
    std::memset(s.bytes, 0, sizeof(s.bytes));
    std::memcpy(s.bytes, &value, sizeof(T));
    return t;
  }
  // A virtual tensor shaped like the score matrix [B, Hq, Lq, Lk] (packed).
  const Desc& scores(const std::string& name, cudnnDataType_t dt) {
    return tensor(name, dt, {b_, h_, lq_, lk_}, {h_ * lq_ * lk_, lq_ * lk_, lk_, 1}, true);
  }
  // A per-row tensor [B, Hq, Lq, 1] (packed); virtual unless it is a graph output.
  const Desc& rows(const std::string& name, bool is_virtual) {
    return tensor(name, CUDNN_DATA_FLOAT, {b_, h_, lq_, 1}, {h_ * lq_, lq_, 1, 1}, is_virtual);
  }

  // y = mode(x[, b][, t]) elementwise with broadcasting; `prec` is the compute type.
  const Desc& pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, const Desc& x, const Desc* b,
                        const Desc& y, const Desc* t = nullptr, int64_t axis = -1) {
    Desc& pw = g_.op_params_.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise for " + y.name());
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode).set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, prec);
    if (axis >= 0) pw.set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis);
    pw.finalize();
    Desc& op = g_.ops_.emplace_back(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "operation " + y.name());
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw).set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y).finalize();
    return y;
  }
  // y[..., 0] = reduce over the last dim of x.
  const Desc& reduction(cudnnReduceTensorOp_t mode, const Desc& x, const Desc& y) {
    Desc& r = g_.op_params_.emplace_back(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction for " + y.name());
    r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode)
        .set_dtype(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
        .finalize();
    g_.ops_.emplace_back(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "operation " + y.name())
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
        .finalize();
    return y;
  }
  // c = a·b over the last two dims; the overrides give per-batch valid M / N / K extents (key padding).
  const Desc& matmul(const Desc& a, const Desc& b, const Desc& c, const Desc* m_override, const Desc* n_override,
                     const Desc* k_override, bool zero_padding) {
    Desc& mm = g_.op_params_.emplace_back(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul for " + c.name());
    mm.set_dtype(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
    if (zero_padding) mm.set_double(CUDNN_ATTR_MATMUL_PADDING_VALUE, 0.0);
    mm.finalize();
    Desc& op = g_.ops_.emplace_back(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "operation " + c.name());
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    if (m_override) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, *m_override);
    if (n_override) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, *n_override);
    if (k_override) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, *k_override);
    op.finalize();
    return c;
  }

  void set_score_shape(int64_t b, int64_t h, int64_t lq, int64_t lk) { b_ = b, h_ = h, lq_ = lq, lk_ = lk; }

 private:
  SdpaGraph& g_;
  int64_t next_uid_ = 1;
  int64_t b_ = 0, h_ = 0, lq_ = 0, lk_ = 0;
};

SdpaGraph::SdpaGraph(const Problem& p) {
  GraphBuilder gb(*this);
  const int64_t B = p.B, Hq = p.Hq, Hkv = p.Hkv, Lq = p.Lq, Lk = p.Lk;
  const cudnnDataType_t io = to_cudnn(p.dtype);
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, boolean = CUDNN_DATA_BOOLEAN;
  gb.set_score_shape(B, Hq, Lq, Lk);
  const SdpaStrides st = SdpaStrides::from_layout(p);

  // Inputs. K as Kᵀ: [B, Hkv, Dqk, Lk].
  const Desc& q = gb.tensor("Q", io, {B, Hq, Lq, p.Dqk}, st.q, false);
  const Desc& kt = gb.tensor("K^T", io, {B, Hkv, p.Dqk, Lk}, {st.k[0], st.k[1], st.k[3], st.k[2]}, false);
  const Desc& v = gb.tensor("V", io, {B, Hkv, Lk, p.Dv}, st.v, false);
  uids_.q = gb.uid_of(q), uids_.k = gb.uid_of(kt), uids_.v = gb.uid_of(v);

  // Key padding is cuDNN's padding mask with per-batch lengths; every query row of our model is valid.
  const bool padded = !p.key_lengths.empty();
  const Desc* seq_q = nullptr;
  const Desc* seq_kv = nullptr;
  if (padded) {
    seq_q = &gb.tensor("seq_len_q", i32, {B, 1, 1, 1}, {1, 1, 1, 1}, false);
    seq_kv = &gb.tensor("seq_len_kv", i32, {B, 1, 1, 1}, {1, 1, 1, 1}, false);
    uids_.seq_q = gb.uid_of(*seq_q), uids_.seq_kv = gb.uid_of(*seq_kv);
  }
  const float neg_inf = -std::numeric_limits<float>::infinity();

  // S = Q·Kᵀ [B, Hq, Lq, Lk], fp32.
  const Desc* s = &gb.matmul(q, kt, gb.scores("S", f32), seq_q, seq_kv, nullptr, padded);
  const Desc& scale = gb.scalar("scale", f32, static_cast<float>(p.effective_scale()));
  s = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *s, &scale, gb.scores("S*scale", f32));

  if (p.bias_shape) {
    const auto& bs = *p.bias_shape;
    const Tensor layout(p.bias_dtype, {bs[0], bs[1], bs[2], bs[3]});  // contiguous strides of the bias shape
    const Desc& bias = gb.tensor("bias", to_cudnn(p.bias_dtype), layout.shape, layout.strides, false);
    uids_.bias = gb.uid_of(bias);
    s = &gb.pointwise(CUDNN_POINTWISE_ADD, f32, *s, &bias, gb.scores("S+bias", f32));
  }

  if (padded) {  // keep (row < seq_q[b]) && (col < seq_kv[b]); -inf elsewhere
    const Desc& row = gb.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, *s, nullptr, gb.scores("pad row", i32), nullptr, 2);
    const Desc& col = gb.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, *s, nullptr, gb.scores("pad col", i32), nullptr, 3);
    const Desc& row_ok = gb.pointwise(CUDNN_POINTWISE_CMP_LT, boolean, row, seq_q, gb.scores("row<seq_q", boolean));
    const Desc& col_ok = gb.pointwise(CUDNN_POINTWISE_CMP_LT, boolean, col, seq_kv, gb.scores("col<seq_kv", boolean));
    const Desc& keep = gb.pointwise(CUDNN_POINTWISE_LOGICAL_AND, boolean, row_ok, &col_ok, gb.scores("pad keep", boolean));
    const Desc& fill = gb.scalar("padding fill", f32, neg_inf);
    s = &gb.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, *s, &fill, gb.scores("S padded", f32), &keep);
  }

  if (p.causal) {  // keep col <= row + offset: top-left offset 0, bottom-right offset seq_kv[b] - seq_q[b]
    const Desc* row = &gb.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, *s, nullptr, gb.scores("causal row", i32), nullptr, 2);
    if (p.alignment == Alignment::bottom_right) {
      const Desc& kv = padded ? *seq_kv : gb.scalar("Lk", i32, static_cast<int32_t>(Lk));
      const Desc& qq = padded ? *seq_q : gb.scalar("Lq", i32, static_cast<int32_t>(Lq));
      row = &gb.pointwise(CUDNN_POINTWISE_ADD, i32, *row, &kv, gb.scores("row+seq_kv", i32));
      row = &gb.pointwise(CUDNN_POINTWISE_SUB, i32, *row, &qq, gb.scores("row+seq_kv-seq_q", i32));
    }
    const Desc& col = gb.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, *s, nullptr, gb.scores("causal col", i32), nullptr, 3);
    const Desc& keep = gb.pointwise(CUDNN_POINTWISE_CMP_GE, boolean, *row, &col, gb.scores("row>=col", boolean));
    const Desc& fill = gb.scalar("causal fill", f32, neg_inf);
    s = &gb.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, *s, &fill, gb.scores("S causal", f32), &keep);
  }

  // Softmax along keys, in the max/sub/exp/sum/div form; stats = max + log(sum) is the natural-log lse.
  const Desc& m = gb.reduction(CUDNN_REDUCE_TENSOR_MAX, *s, gb.rows("row max", true));
  const Desc& shifted = gb.pointwise(CUDNN_POINTWISE_SUB, f32, *s, &m, gb.scores("S-max", f32));
  const Desc& e = gb.pointwise(CUDNN_POINTWISE_EXP, f32, shifted, nullptr, gb.scores("exp(S-max)", f32));
  const Desc& z = gb.reduction(CUDNN_REDUCE_TENSOR_ADD, e, gb.rows("row sum", true));
  const Desc& log_z = gb.pointwise(CUDNN_POINTWISE_LOG, f32, z, nullptr, gb.rows("log sum", true));
  const Desc& stats = gb.pointwise(CUDNN_POINTWISE_ADD, f32, m, &log_z, gb.rows("stats", !p.want_lse));
  if (p.want_lse) uids_.stats = gb.uid_of(stats);
  // The tensor that feeds the second matmul is in the I/O type, as cuDNN's fused engines expect.
  const bool dropout = p.dropout_p > 0;
  const Desc* prob = &gb.pointwise(CUDNN_POINTWISE_DIV, f32, e, &z, gb.scores("P", dropout ? f32 : io));
  if (dropout) {  // cuDNN's custom dropout: P * 1/(1-p) * keep, with the caller's keep-mask in the I/O type
    const Desc& keep_scale = gb.scalar("dropout scale", f32, static_cast<float>(1.0 / (1.0 - p.dropout_p)));
    const Desc& keep = gb.tensor("keep", io, {B, Hq, Lq, Lk}, {Hq * Lq * Lk, Lq * Lk, Lk, 1}, false);
    uids_.keep = gb.uid_of(keep);
    prob = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *prob, &keep_scale, gb.scores("P/(1-p)", f32));
    prob = &gb.pointwise(CUDNN_POINTWISE_MUL, f32, *prob, &keep, gb.scores("P dropped", io));
  }

  // O = P·V [B, Hq, Lq, Dv].
  const Desc& o = gb.tensor("O", io, {B, Hq, Lq, p.Dv}, st.o, false);
  uids_.o = gb.uid_of(o);
  gb.matmul(*prob, v, o, seq_q, nullptr, seq_kv, false);

  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Desc& op : ops_) raw.push_back(op.get());
  graph_ = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph " + p.name());
  graph_.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()), raw.data())
      .finalize();
}

}  // namespace attncheck::cudnn
