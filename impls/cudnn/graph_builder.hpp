// The builder both SDPA graphs (forward: sdpa_graph.cpp, backward: sdpa_graph_backward.cpp) append their tensors
// and operations with: tensors (device, virtual, by-value scalars), pointwise, reduction, matmul and reshape
// operations, each returning the tensor it created. Shared by the two translation units only.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "sdpa_graph.hpp"

namespace attncheck::cudnn {

inline cudnnDataType_t to_cudnn(DType t) {
  switch (t) {
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f32: return CUDNN_DATA_FLOAT;
    default: throw std::invalid_argument(std::string("cudnn: no cuDNN data type for ") + to_string(t));
  }
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
      case CUDNN_DATA_HALF:
      case CUDNN_DATA_BFLOAT16: return 2;
      case CUDNN_DATA_FLOAT:
      case CUDNN_DATA_INT32: return 4;
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
  const Desc& pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, const Desc& x, const Desc* b, const Desc& y,
                        const Desc* t = nullptr, int64_t axis = -1) {
    Desc& pw = g_.op_params_.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise for " + y.name());
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, prec);
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

  // y = x with other dims/strides over the same elements (a transpose), possibly in another data type.
  const Desc& reshape(const Desc& x, const Desc& y) {
    g_.ops_.emplace_back(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "operation " + y.name())
        .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y)
        .finalize();
    return y;
  }
  // A packed (row-major) tensor of any 4-d shape.
  const Desc& packed(const std::string& name, cudnnDataType_t dt, const std::vector<int64_t>& dims, bool is_virtual) {
    return tensor(name, dt, dims, {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}, is_virtual);
  }

  void set_score_shape(int64_t b, int64_t h, int64_t lq, int64_t lk) { b_ = b, h_ = h, lq_ = lq, lk_ = lk; }

 private:
  SdpaGraph& g_;
  int64_t next_uid_ = 1;
  int64_t b_ = 0, h_ = 0, lq_ = 0, lk_ = 0;
};

// What both passes start from: Q, Kᵀ, the key-padding lengths (nullptr without padding) and the scale scalar.
struct SdpaInputs {
  const Desc* q = nullptr;
  const Desc* kt = nullptr;
  const Desc* seq_q = nullptr;
  const Desc* seq_kv = nullptr;
  const Desc* scale = nullptr;
};
SdpaInputs sdpa_inputs(GraphBuilder& gb, const Problem& p, SdpaUids& uids);
// S = Q·Kᵀ·scale [+ bias], fp32 [B, Hq, Lq, Lk] (the bias becomes a graph input).
const Desc* scaled_scores(GraphBuilder& gb, const Problem& p, const SdpaInputs& in, SdpaUids& uids);
// -inf outside the valid keys (with padding) / above the causal diagonal (with causal); `s` unchanged otherwise.
const Desc* padding_mask(GraphBuilder& gb, const SdpaInputs& in, const Desc* s);
const Desc* causal_mask(GraphBuilder& gb, const Problem& p, const SdpaInputs& in, const Desc* s);

// The operations of each pass, appended to the graph the builder fills (finalised by SdpaGraph's constructor).
void build_forward(GraphBuilder& gb, const Problem& p, SdpaUids& uids);
void build_backward(GraphBuilder& gb, const Problem& p, SdpaUids& uids);

}  // namespace attncheck::cudnn
