// The host side of a cuDNN variant pack for the SDPA graph: what to upload for each device tensor and how device
// results land in Outputs. Kept apart from the CUDA calls so it is tested without a GPU; run() only moves bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/backward.hpp"
#include "attncheck/problem.hpp"
#include "sdpa_graph.hpp"

namespace attncheck::cudnn {

struct HostBinding {
  int64_t uid = 0;
  std::string name;
  int64_t bytes = 0;  // device allocation
  bool is_output = false;
  bool is_work = false;         // a work tensor of the graph (backward: softmax_sum, dQ accumulator): allocated only
  std::vector<uint8_t> upload;  // inputs: exactly `bytes` bytes in the layout the graph declares
};

// What the backward graph reads besides the problem's inputs: the forward's outputs (out and lse) and dO.
struct BackwardData {
  const Outputs& fwd;
  const Tensor& dout;
};

// One binding per device tensor of the graph, in the graph's order. Inputs are re-laid out to the declared
// strides when theirs differ, the u8 keep-mask becomes 0/1 in the I/O dtype, key lengths become int32.
// Throws std::logic_error if the graph declares a tensor the problem gives no data for.
// With `bwd` (a backward graph): O, stats (the forward's lse as fp32) and dO are inputs, the gradients outputs.
std::vector<HostBinding> host_bindings(const Problem& p, const Inputs& in, const SdpaGraph& g,
                                       const BackwardData* bwd = nullptr);

// Stores one device result (the bytes of the tensor with this uid) into the outputs: `out` as is, the fp32
// stats as lse. Throws std::logic_error for a uid that is not an output or a size that does not match.
void store_output(const Problem& p, const SdpaGraph& g, int64_t uid, const std::vector<uint8_t>& bytes, Outputs& out);
// The same for a backward graph: dQ, dK, dV in the layouts of make_gradients(p), dBias [1, Hq, Lq, Lk].
void store_gradient(const Problem& p, const SdpaGraph& g, int64_t uid, const std::vector<uint8_t>& bytes,
                    Gradients& grads);

}  // namespace attncheck::cudnn
