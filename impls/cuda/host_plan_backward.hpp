// Host side of the CUDA backward pass, shared by `cuda` and `cuda-emulated`: what it supports, and the BwdParams of
// a problem with pointers into host memory (inputs, the forward's O and lse, dO, the gradients and the workspaces).
#pragma once

#include <vector>

#include "attncheck/backward.hpp"
#include "host_plan.hpp"
#include "kernels/dispatch_backward.cuh"

namespace attncheck::cuda {

// kernel_supports(p), plus the dS workspace that dBias needs (B·Hq·Lq·Lk accumulation-type elements, at most 4 GiB).
Support backward_supports(const Problem& p);

struct BwdPlan {
  HostPlan inputs;  // q, k, v, masks, bias, dropout (params.out = the forward's O, params.lse = its lse)
  BwdParams params{};
  std::vector<unsigned char> d, live, ds, dbias;  // workspaces (d: D per row; ds, dbias: only with a bias)
};

// Checks what the kernels assume of their buffers (throws std::invalid_argument naming the tensor): fwd.lse present
// in stat_dtype and contiguous, dout in the problem's dtype and shape, gradients from make_gradients(p).
BwdPlan make_backward_plan(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout, Gradients& g);

// The dBias workspace (accumulation type, the bias shape row-major) rounded into g.dbias.
void store_dbias(const BwdPlan& plan, Gradients& g);

}  // namespace attncheck::cuda
