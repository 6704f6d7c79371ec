// The backward pass of the CPU backend: `cpu` (dense: Eigen GEMMs over the materialised Lq x Lk score, weight and
// dS matrices of a head) and `cpu-flash` (FlashAttention-2 style: P recomputed tile by tile from the forward's lse,
// D = rowsum(dO∘O), no Lq x Lk storage). with_backward() adds them to a forward implementation.
#pragma once

#include "attncheck/backward.hpp"
#include "attncheck/impl.hpp"

namespace attncheck::cpu {

enum class BackwardAlgo { dense, flash };
// An implementation that runs `fwd` forward and the given algorithm backward.
ImplPtr with_backward(ImplPtr fwd, BackwardAlgo algo);

inline constexpr int64_t kBwdBlockK = 64;  // cpu-flash: keys per dK/dV task
inline constexpr int64_t kBwdBlockQ = 64;  // cpu-flash: queries per dQ task

}  // namespace attncheck::cpu
