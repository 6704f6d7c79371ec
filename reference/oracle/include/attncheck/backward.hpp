// The oracle of the backward pass: gradients dQ, dK, dV (and dBias) of the looped reference forward for a given
// upstream gradient dO, in fp64 per-token loops written as the textbook derivation reads (docs/backward.md).
// Bitwise deterministic for any thread count. Outputs only: the gradients' error scales are the tolerance side's
// (attncheck/grad_scales.hpp).
#pragma once

#include <optional>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace oracle {

struct BackwardResult {
  std::vector<double> dq;     // [B, Hq, Lq, Dqk], row-major
  std::vector<double> dk;     // [B, Hkv, Lk, Dqk]
  std::vector<double> dv;     // [B, Hkv, Lk, Dv]
  std::vector<double> dbias;  // problem.bias_shape, row-major; empty without bias
  std::vector<double> d;      // [B, Hq, Lq]: D_i = sum_j P'_ij dP'_ij (= dO_i . O_i); 0 on fully masked rows
  std::vector<double> lse;    // [B, Hq, Lq]: the forward's lse (what a flash backward saves)
  std::vector<double> ds;     // [B,Hq,Lq,Lk] dS = dL/d(score after the logit stage and bias), only when asked (tests)
};

// Validates problem, inputs and dout ([B,Hq,Lq,Dv] in problem.layout, any floating dtype; throws
// std::invalid_argument naming the field), then computes in double. Rows with no visible key contribute exactly
// zero to every gradient (every fully-masked policy); masked keys and keys with zero weight are never read.
// observer, when given, sees every row (grad_trace.hpp).
class GradObserver;
BackwardResult reference_backward(const Problem& p, const Inputs& in, const Tensor& dout, int threads = 0,
                                  bool want_ds = false, GradObserver* observer = nullptr);

// Gradients as an implementation delivers them: dq, dk, dv in problem.dtype and problem.layout, dbias (only with a
// bias) in bias_dtype, contiguous in bias_shape. make_gradients allocates them zero-filled.
struct Gradients {
  Tensor dq, dk, dv;
  std::optional<Tensor> dbias;
};
Gradients make_gradients(const Problem& p);

// Shapes of the gradient tensors (logical order) and an allocated, zero-filled dout of the right shape.
std::vector<int64_t> grad_shape(const Problem& p, int which);  // 0 = dq, 1 = dk, 2 = dv, 3 = dbias
Tensor make_dout(const Problem& p);

}  // namespace oracle
}  // namespace attncheck
