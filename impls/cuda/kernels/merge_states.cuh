// The combine kernel of split-KV and cascade attention (FlashAttention's flash_attn_combine, FlashInfer
// merge_states, vLLM merge_attn_states): N stored attention states -> one, under the declared conventions
// (docs/states.md). One warp per query row: the lanes read the N states' statistics in parallel (lane n holds
// state n, then n + 32, ...), find the largest exponent X of the non-empty states with a warp max, weight each by
// b^(x_n - X) (b = e or 2), and the lanes then share the head dimension: lane t accumulates O[d] for d = t, t + 32,
// ... over the states in index order, each weight broadcast from its lane by a shuffle. An empty state (its
// exponent the declared sentinel, or a zero sum) has no weight and its O is never read, so a NaN stored there
// cannot leak; a row of empty states is written as the empty state. Accumulation in fp32, O stored in its dtype.
#pragma once

#include "attn_common.cuh"

namespace attncheck::cuda {

// Strides are in elements of each buffer. Inputs are stacked over the state index n.
struct MergeParams {
  const void* o_in;   // [N, B, H, L, D] in the O dtype
  const float* x_in;  // [N, B, H, L]: lse (normalised form) or the row max m (unnormalised)
  const float* l_in;  // [N, B, H, L]: the row sum (unnormalised form), nullptr for the normalised form
  void* o_out;        // [B, H, L, D]
  float* x_out;       // [B, H, L]
  float* l_out;       // [B, H, L] or nullptr
  int64_t o_in_stride[5], x_in_stride[4], l_in_stride[4], o_out_stride[4], x_out_stride[3], l_out_stride[3];
  int N, B, H, L, D;
  int base_two;    // exponents are log2 (lse in bits) instead of nats
  float sentinel;  // the stored exponent of an empty state (-inf, +inf or a finite value)
};

constexpr int kMergeRowsPerBlock = 4;   // warps per block
constexpr int kMergeMaxHeadDim = 1024;  // accumulators per lane: 1024 / 32

inline namespace ATTNCHECK_KERNEL_NS {

__device__ inline float merge_pow(const MergeParams& p, float x) { return p.base_two ? exp2f(x) : expf(x); }
__device__ inline float merge_log(const MergeParams& p, float x) { return p.base_two ? log2f(x) : logf(x); }

template <class T>
__global__ void merge_states_kernel(MergeParams p) {
  constexpr unsigned kAll = 0xffffffffu;
  constexpr int kPerLane = kMergeMaxHeadDim / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t rows = static_cast<int64_t>(p.B) * p.H * p.L;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kMergeRowsPerBlock + warp;
  if (row >= rows) return;  // the whole warp leaves together; no block-wide barrier below
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.H) * p.L));
  const int h = static_cast<int>((row / p.L) % p.H);
  const int64_t i = row % p.L;
  auto stat = [&](const int64_t* s, int n) { return n * s[0] + b * s[1] + h * s[2] + i * s[3]; };

  // 1. The largest exponent of the non-empty states (lanes over states; empty ones take no part).
  float X = -INFINITY;
  bool any = false;
  for (int n = lane; n < p.N; n += 32) {
    const float x = gload(p.x_in, stat(p.x_in_stride, n));
    const float l = p.l_in ? gload(p.l_in, stat(p.l_in_stride, n)) : 1.f;
    if (x == p.sentinel || l == 0.f) continue;
    X = any ? max_keep(X, x) : x;
    any = true;
  }
  X = warp_max(X);
  any = __any_sync(kAll, any);

  // 2. Weights, the denominator, and the weighted sum of O (lanes over the head dimension).
  float acc[kPerLane];
  for (int k = 0; k < kPerLane; ++k) acc[k] = 0.f;
  float S = 0.f;
  for (int n0 = 0; any && n0 < p.N; n0 += 32) {  // uniform over the warp: every lane takes every shuffle
    const int n = n0 + lane;
    float w = 0.f;
    bool live = false;
    if (n < p.N) {
      const float x = gload(p.x_in, stat(p.x_in_stride, n));
      const float l = p.l_in ? gload(p.l_in, stat(p.l_in_stride, n)) : 1.f;
      live = !(x == p.sentinel || l == 0.f);
      if (live) w = merge_pow(p, x - X), S += w * l;
    }
    const unsigned alive = __ballot_sync(kAll, live);
    for (int j = 0; j < 32 && n0 + j < p.N; ++j) {
      const float wj = __shfl_sync(kAll, w, j);
      if (!((alive >> j) & 1u)) continue;  // an empty state's O is never read
      for (int k = 0; k < kPerLane; ++k) {
        const int d = lane + 32 * k;
        if (d >= p.D) break;
        const int64_t off = (n0 + j) * p.o_in_stride[0] + b * p.o_in_stride[1] + h * p.o_in_stride[2] +
                            i * p.o_in_stride[3] + d * p.o_in_stride[4];
        acc[k] = ac_fma(wj, load_as<T>(p.o_in, off), acc[k]);
      }
    }
  }
  S = warp_sum(S);

  // 3. The merged state: normalised (O / S, lse = X + log S) or unnormalised (O, max X, sum S); empty when no
  // state had a key.
  const bool norm = p.l_out == nullptr;
  for (int k = 0; k < kPerLane; ++k) {
    const int d = lane + 32 * k;
    if (d >= p.D) break;
    const float o = !any ? 0.f : norm ? acc[k] / S : acc[k];
    store_as<T>(p.o_out, offset4(p.o_out_stride, b, h, i, d), o);
  }
  if (lane == 0) {
    const int64_t at = b * p.x_out_stride[0] + h * p.x_out_stride[1] + i * p.x_out_stride[2];
    if (norm)
      gstore(p.x_out, at, any ? X + merge_log(p, S) : p.sentinel);
    else {
      gstore(p.x_out, at, any ? X : p.sentinel);
      gstore(p.l_out, b * p.l_out_stride[0] + h * p.l_out_stride[1] + i * p.l_out_stride[2], any ? S : 0.f);
    }
  }
}

}  // namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
