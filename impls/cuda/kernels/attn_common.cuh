// What both attention kernels share, compiled by nvcc and by g++: the launch parameters (a plain struct of
// pointers and element strides), element conversion, the visibility rule of every mask kind and the score
// transform, in the reference's order: scale -> softcap -> +bias -> mask.
#pragma once

#include <cmath>
#include <cstdint>

#include "portability.cuh"

namespace attncheck::cuda {

// Policies of a row without any visible key (same order as attncheck::FullyMasked).
enum : int { kFullyMaskedNan = 0, kFullyMaskedZero = 1, kFullyMaskedUniform = 2 };

struct AttnParams {
  // Logical [B, H, L, D] tensors in any memory order: element (b, h, l, d) is at b*s[0] + h*s[1] + l*s[2] + d*s[3].
  const void* q;
  const void* k;
  const void* v;
  void* out;
  int64_t q_stride[4], k_stride[4], v_stride[4], o_stride[4];
  float* lse;      // [B, Hq, Lq] or nullptr
  float* weights;  // [B, Hq, Lq, Lk] or nullptr
  float* scratch;  // [B, Hq, Lq, Lk] workspace of the straightforward kernel when weights is nullptr
  int B, Hq, Hkv, Lq, Lk, Dqk, Dv;
  float scale;
  float softcap;  // > 0: s -> c * tanh(s / c)
  int causal;
  int64_t window_left, window_right;  // -1: unbounded
  const int64_t* diag_offset;         // [B]: key j is on the diagonal of query i when j == i + diag_offset[b]
  const int64_t* key_length;          // [B]: valid keys of each batch
  const unsigned char* mask;          // broadcast boolean mask (0 = masked) or nullptr; stride 0 on broadcast dims
  int64_t mask_stride[4];
  const float* bias;  // broadcast additive bias (converted to fp32) or nullptr
  int64_t bias_stride[4];
  int fill_finite;    // masked scores are fill_value and take part in the softmax; otherwise -inf
  float fill_value;
  int fully_masked;   // kFullyMasked*
  const unsigned char* keep;  // dropout keep-mask [B, Hq, Lq, Lk] or nullptr
  float keep_scale;           // 1 / (1 - p)
};

inline namespace ATTNCHECK_KERNEL_NS {

__device__ inline float neg_inf() { return -INFINITY; }

template <class T>
__device__ inline float load_as_float(const void* base, int64_t off);
template <>
__device__ inline float load_as_float<float>(const void* base, int64_t off) {
  return static_cast<const float*>(base)[off];
}
template <>
__device__ inline float load_as_float<__half>(const void* base, int64_t off) {
  return __half2float(static_cast<const __half*>(base)[off]);
}
template <>
__device__ inline float load_as_float<__nv_bfloat16>(const void* base, int64_t off) {
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[off]);
}

template <class T>
__device__ inline void store_from_float(void* base, int64_t off, float x);
template <>
__device__ inline void store_from_float<float>(void* base, int64_t off, float x) {
  static_cast<float*>(base)[off] = x;
}
template <>
__device__ inline void store_from_float<__half>(void* base, int64_t off, float x) {
  static_cast<__half*>(base)[off] = __float2half_rn(x);
}
template <>
__device__ inline void store_from_float<__nv_bfloat16>(void* base, int64_t off, float x) {
  static_cast<__nv_bfloat16*>(base)[off] = __float2bfloat16_rn(x);
}

__device__ inline int64_t offset4(const int64_t* s, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * s[0] + b * s[1] + c * s[2] + d * s[3];
}

// The reference's max: a NaN candidate never replaces the running value (std::max(m, s) == (m < s ? s : m)).
__device__ inline float max_keep(float m, float s) { return m < s ? s : m; }

// Is key j visible to query i of (b, h)? `diag` = i + diag_offset[b], `valid` = key_length[b].
__device__ inline bool key_visible(const AttnParams& p, int b, int h, int64_t i, int64_t j, int64_t diag,
                                            int64_t valid) {
  if (j >= valid) return false;                                           // key padding
  if (p.causal && j > diag) return false;                                 // causal: j <= i + offset
  if (p.window_left >= 0 && j < diag - p.window_left) return false;       // window, left edge
  if (p.window_right >= 0 && j > diag + p.window_right) return false;     // window, right edge
  if (p.mask && p.mask[offset4(p.mask_stride, b, h, i, j)] == 0) return false;  // boolean mask
  return true;
}

// scale -> softcap -> + bias, for a visible key whose dot product (fp32) is `dot`.
__device__ inline float transform_score(const AttnParams& p, float dot, int b, int h, int64_t i, int64_t j) {
  float s = dot * p.scale;
  if (p.softcap > 0.f) s = p.softcap * tanhf(s / p.softcap);
  if (p.bias) s += p.bias[offset4(p.bias_stride, b, h, i, j)];
  return s;
}

// Dropout factor of weight (b, h, i, j): 0 for a dropped key, 1/(1-p) for a kept one, 1 without dropout.
__device__ inline float keep_factor(const AttnParams& p, int b, int h, int64_t i, int64_t j) {
  if (!p.keep) return 1.f;
  return p.keep[((static_cast<int64_t>(b) * p.Hq + h) * p.Lq + i) * p.Lk + j] ? p.keep_scale : 0.f;
}

// Sum and max over the 32 lanes of a warp (butterfly: every lane ends with the result).
__device__ inline float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ inline float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = max_keep(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ inline int warp_sum_int(int x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The weight every key gets in a row without a visible key (reference: nan -> NaN, zero -> 0, uniform -> 1/Lk).
__device__ inline float fully_masked_weight(const AttnParams& p) {
  if (p.fully_masked == kFullyMaskedNan) return NAN;
  if (p.fully_masked == kFullyMaskedUniform) return 1.f / static_cast<float>(p.Lk);
  return 0.f;
}
// lse of such a row: log(sum_j exp(fill)) = fill + log(Lk) with a finite fill, -inf otherwise.
__device__ inline float fully_masked_lse(const AttnParams& p) {
  return p.fill_finite ? p.fill_value + logf(static_cast<float>(p.Lk)) : neg_inf();
}

}  // inline namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
