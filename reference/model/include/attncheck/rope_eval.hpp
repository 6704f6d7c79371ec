// The per-element arithmetic of the position stage (QK-norm, RoPE; rope.hpp) on plain values, so the fp64
// reference and the CUDA kernels (nvcc device code and its host emulation) compute it with the same functions,
// as mod_eval.hpp does for the modifications. Positions and frequencies are the caller's (rope.hpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "attncheck/mod_eval.hpp"  // ATTNCHECK_HD

namespace attncheck::inline model::rope_eval {

// The head dims (a, b) of frequency pair f: GPT-J interleaved (2f, 2f + 1), GPT-NeoX (f, f + rotary_dim/2).
struct PairDims {
  int64_t a, b;
};
ATTNCHECK_HD inline PairDims pair_dims(int64_t f, int64_t rotary_dim, bool interleaved) {
  return interleaved ? PairDims{2 * f, 2 * f + 1} : PairDims{f, f + rotary_dim / 2};
}
// The pair that head dim d < rotary_dim belongs to.
ATTNCHECK_HD inline int64_t pair_of(int64_t d, int64_t rotary_dim, bool interleaved) {
  return interleaved ? d / 2 : d % (rotary_dim / 2);
}

// QK-norm's factor 1 / sqrt(mean(x^2) + eps), from the sum of squares of the Dqk values, in fp64.
ATTNCHECK_HD inline double rms_scale(double sum_sq, int64_t dqk, double eps) {
  return 1.0 / sqrt(sum_sq / static_cast<double>(dqk) + eps);
}

// One pair rotated by the angle whose cosine and sine are c and s, times the attention factor m:
// x_a' = m (x_a c - x_b s), x_b' = m (x_b c + x_a s).
template <class X>
ATTNCHECK_HD inline void rotate(X& xa, X& xb, X c, X s, X m) {
  const X a = xa, b = xb;
  xa = m * (a * c - b * s);
  xb = m * (b * c + a * s);
}

}  // namespace attncheck::inline model::rope_eval
