// The SDPA forward pass as a cuDNN 9 backend operation graph, plus what is needed to pick an engine for it with or
// without a GPU: device-properties descriptors for named GPUs (sm_80 A100, sm_90 H100), heuristics, plans.
// The graph is the composite form cuDNN's fused flash-attention engines recognise (see docs/cudnn.md):
//   S = (Q·Kᵀ) * scale [+ bias] [padding select] [causal select]; softmax by max/sub/exp/sum/div with
//   stats = max + log(sum); [P = P * 1/(1-p) * keep]; O = P·V.
// The backward graph is the composite form of cudnn-frontend's SDPA backward (docs/cudnn.md, "Backward"):
//   softmax_sum = (1-p)·rowsum(dO∘O); P = exp(S - stats) with S recomputed and masked as in the forward;
//   dV = (P·keep/(1-p))ᵀ·dO; dS = P·(dP·keep - softmax_sum)/(1-p) with dP = dO·Vᵀ; [dBias = Σ_b dS];
//   dK = (scale·dS)ᵀ·Q; dQ = scale·dS·K; GQA gradients summed over the group's heads by reductions.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "attncheck/problem.hpp"
#include "backend_desc.hpp"

namespace attncheck::cudnn {

// Unique ids of the tensors the caller binds in a variant pack; 0 = not part of this graph.
struct SdpaUids {
  int64_t q = 0, k = 0, v = 0, o = 0;
  int64_t stats = 0;              // lse [B, Hq, Lq, 1] fp32, when want_lse
  int64_t bias = 0;               // when bias_shape
  int64_t seq_q = 0, seq_kv = 0;  // int32 [B, 1, 1, 1], when key padding is used
  int64_t keep = 0;               // dropout keep-mask [B, Hq, Lq, Lk] in the I/O dtype, when dropout_p > 0
  // Backward graph only: dO (strides of O), stats as an input, the gradients (strides of Q, K, V; dBias
  // [1, Hq, Lq, Lk] in the bias dtype) and two fp32 work tensors: softmax_sum [B, Hq, Lq, 1] = (1-p)·rowsum(dO∘O),
  // and without a bias the dQ accumulator [B, Hq, Lq, Dqk] (cuDNN initialises both itself from 9.6 on).
  int64_t d_o = 0, dq = 0, dk = 0, dv = 0, dbias = 0;
  int64_t softmax_sum = 0, dq_accum = 0;
};

// Which pass a graph computes: the forward (out, stats) or the backward (dQ, dK, dV, dBias from dO, O, stats).
enum class Pass { forward, backward };

// Element strides of q, k, v, o as the problem's layout stores them (logical order [B, H, L, D]).
struct SdpaStrides {
  std::vector<int64_t> q, k, v, o;
  static SdpaStrides from_layout(const Problem& p);
};

class SdpaGraph {
 public:
  // Builds and finalizes the operation graph of `pass`. The problem must be one the cudnn backend supports
  // (cudnn_supports, and cudnn_supports_backward for the backward); the graph does not re-check the problem
  // model's semantics.
  explicit SdpaGraph(const Problem& p, Pass pass = Pass::forward);
  SdpaGraph(const SdpaGraph&) = delete;
  SdpaGraph& operator=(const SdpaGraph&) = delete;

  const Desc& op_graph() const { return graph_; }
  const SdpaUids& uids() const { return uids_; }
  int64_t op_count() const { return static_cast<int64_t>(ops_.size()); }
  // Pass-by-value scalars (scale, mask fill, constant sequence lengths): uid and host address for a variant pack.
  struct Scalar {
    int64_t uid;
    alignas(16) unsigned char bytes[16];  // 16: the byte alignment every tensor of the graph declares
  };
  const std::deque<Scalar>& scalars() const { return scalars_; }
  // Every non-virtual, non-scalar tensor (what a variant pack must bind to device memory) and the bytes its
  // dims and strides span.
  struct DeviceTensor {
    int64_t uid;
    std::string name;
    int64_t bytes;
  };
  const std::vector<DeviceTensor>& device_tensors() const { return device_tensors_; }

 private:
  friend class GraphBuilder;
  std::deque<Desc> tensors_;  // deque: Desc addresses stay valid while the graph grows
  std::deque<Desc> ops_;
  std::deque<Desc> op_params_;  // pointwise / reduction / matmul descriptors the operations refer to
  std::deque<Scalar> scalars_;
  std::vector<DeviceTensor> device_tensors_;
  Desc graph_;
  SdpaUids uids_;
};

// The GPUs the deviceless tests target. Their properties are public data-sheet values.
enum class NamedGpu { a100_sm80, h100_sm90 };
const char* to_string(NamedGpu g);
// CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR built from a JSON description (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION),
// so heuristics and engine checks can run for a GPU that is not present.
Desc named_device_properties(NamedGpu g);
// The same descriptor for a real device through a handle (CUDNN_ATTR_DEVICEPROP_HANDLE).
Desc handle_device_properties(cudnnHandle_t handle);

// Engine configurations cuDNN's heuristics propose for the graph on the device, best first (possibly empty).
std::vector<Desc> heuristic_engine_configs(const SdpaGraph& g, const Desc& device_props,
                                           cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A);

// An execution plan for one engine configuration; throws CudnnError when cuDNN cannot build it.
// With a handle (to execute on its GPU) or with device properties only (deviceless: stops at kernel load).
Desc make_plan(const Desc& engine_config, cudnnHandle_t handle, const Desc& device_props);
Desc make_plan(const Desc& engine_config, const Desc& device_props);
// The global engine index behind a configuration (for messages and tests).
int64_t engine_global_index(const Desc& engine_config);

}  // namespace attncheck::cudnn
