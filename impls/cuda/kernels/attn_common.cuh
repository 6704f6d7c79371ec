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

// The accumulation type of an element type: fp32 for fp32/fp16/bf16, fp64 for fp64.
template <class T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};

struct AttnParams {
  // Logical [B, H, L, D] tensors in any memory order: element (b, h, l, d) is at b*s[0] + h*s[1] + l*s[2] + d*s[3].
  const void* q;
  const void* k;
  const void* v;
  void* out;
  int64_t q_stride[4], k_stride[4], v_stride[4], o_stride[4];
  // Statistics and workspaces hold the accumulation type (fp64 for fp64 problems, fp32 otherwise).
  void* lse;      // [B, Hq, Lq] or nullptr
  void* weights;  // [B, Hq, Lq, Lk] or nullptr
  void* scratch;  // [B, Hq, Lq, Lk] workspace of the straightforward kernel when weights is nullptr
  int B, Hq, Hkv, Lq, Lk, Dqk, Dv;
  double scale;    // rounded to the accumulation type in the kernels
  double softcap;  // > 0: s -> c * tanh(s / c)
  int causal;
  int64_t window_left, window_right;  // -1: unbounded
  const int64_t* diag_offset;         // [B]: key j is on the diagonal of query i when j == i + diag_offset[b]
  const int64_t* key_length;          // [B]: valid keys of each batch
  const unsigned char* mask;          // broadcast boolean mask (0 = masked) or nullptr; stride 0 on broadcast dims
  int64_t mask_stride[4];
  const void* bias;  // broadcast additive bias in the accumulation type, or nullptr
  int64_t bias_stride[4];
  int fill_finite;    // masked scores are fill_value and take part in the softmax; otherwise -inf
  double fill_value;
  int fully_masked;   // kFullyMasked*
  const unsigned char* keep;  // dropout keep-mask [B, Hq, Lq, Lk] or nullptr
  double keep_scale;          // 1 / (1 - p)
};

inline namespace ATTNCHECK_KERNEL_NS {

// Math in the accumulation type.
__device__ inline float ac_exp(float x) { return expf(x); }
__device__ inline double ac_exp(double x) { return exp(x); }
__device__ inline float ac_log(float x) { return logf(x); }
__device__ inline double ac_log(double x) { return log(x); }
__device__ inline float ac_tanh(float x) { return tanhf(x); }
__device__ inline double ac_tanh(double x) { return tanh(x); }
__device__ inline float ac_fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ inline double ac_fma(double a, double b, double c) { return fma(a, b, c); }

template <class Acc>
__device__ inline Acc neg_inf() { return -static_cast<Acc>(INFINITY); }

// Element loads widened to the accumulation type, and stores rounded (nearest even) to the element type.
__device__ inline float widen(float x) { return x; }
__device__ inline double widen(double x) { return x; }
__device__ inline float widen(__half x) { return __half2float(x); }
__device__ inline float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
// Every access to global memory goes through gload/gstore: element `off` of the buffer at `base`. The emulation
// checks it against the launch's registered buffers (naming buffer, element, thread and block); nvcc: plain access.
template <class T>
__device__ inline T gload(const T* base, int64_t off) {
  ATTNCHECK_CHECK_GLOBAL(base, off, sizeof(T), false);
  return base[off];
}
template <class T>
__device__ inline void gstore(T* base, int64_t off, T x) {
  ATTNCHECK_CHECK_GLOBAL(base, off, sizeof(T), true);
  base[off] = x;
}

template <class T>
__device__ inline typename AccOf<T>::type load_as(const void* base, int64_t off) {
  return widen(gload(static_cast<const T*>(base), off));
}
template <class T>
__device__ inline void store_as(void* base, int64_t off, typename AccOf<T>::type x);
template <>
__device__ inline void store_as<float>(void* base, int64_t off, float x) { gstore(static_cast<float*>(base), off, x); }
template <>
__device__ inline void store_as<double>(void* base, int64_t off, double x) { gstore(static_cast<double*>(base), off, x); }
template <>
__device__ inline void store_as<__half>(void* base, int64_t off, float x) {
  gstore(static_cast<__half*>(base), off, __float2half_rn(x));
}
template <>
__device__ inline void store_as<__nv_bfloat16>(void* base, int64_t off, float x) {
  gstore(static_cast<__nv_bfloat16*>(base), off, __float2bfloat16_rn(x));
}

__device__ inline int64_t offset4(const int64_t* s, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * s[0] + b * s[1] + c * s[2] + d * s[3];
}

// The reference's max: a NaN candidate never replaces the running value (std::max(m, s) == (m < s ? s : m)).
template <class Acc>
__device__ inline Acc max_keep(Acc m, Acc s) { return m < s ? s : m; }

// Is key j visible to query i of (b, h)? `diag` = i + diag_offset[b], `valid` = key_length[b].
__device__ inline bool key_visible(const AttnParams& p, int b, int h, int64_t i, int64_t j, int64_t diag,
                                   int64_t valid) {
  if (j >= valid) return false;                                           // key padding
  if (p.causal && j > diag) return false;                                 // causal: j <= i + offset
  if (p.window_left >= 0 && j < diag - p.window_left) return false;       // window, left edge
  if (p.window_right >= 0 && j > diag + p.window_right) return false;     // window, right edge
  if (p.mask && gload(p.mask, offset4(p.mask_stride, b, h, i, j)) == 0) return false;  // boolean mask
  return true;
}

// scale -> softcap -> + bias, for a visible key whose dot product is `dot`.
template <class Acc>
__device__ inline Acc transform_score(const AttnParams& p, Acc dot, int b, int h, int64_t i, int64_t j) {
  Acc s = dot * static_cast<Acc>(p.scale);
  if (p.softcap > 0) {
    const Acc c = static_cast<Acc>(p.softcap);
    s = c * ac_tanh(s / c);
  }
  if (p.bias) s += gload(static_cast<const Acc*>(p.bias), offset4(p.bias_stride, b, h, i, j));
  return s;
}

// Dropout factor of weight (b, h, i, j): 0 for a dropped key, 1/(1-p) for a kept one, 1 without dropout.
template <class Acc>
__device__ inline Acc keep_factor(const AttnParams& p, int b, int h, int64_t i, int64_t j) {
  if (!p.keep) return Acc(1);
  return gload(p.keep, ((static_cast<int64_t>(b) * p.Hq + h) * p.Lq + i) * p.Lk + j) ? static_cast<Acc>(p.keep_scale)
                                                                                     : Acc(0);
}

// Sum and max over the 32 lanes of a warp (butterfly: every lane ends with the result).
template <class X>
__device__ inline X warp_sum(X x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
template <class Acc>
__device__ inline Acc warp_max(Acc x) {
  for (int o = 16; o > 0; o >>= 1) x = max_keep(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// The weight every key gets in a row without a visible key (reference: nan -> NaN, zero -> 0, uniform -> 1/Lk).
template <class Acc>
__device__ inline Acc fully_masked_weight(const AttnParams& p) {
  if (p.fully_masked == kFullyMaskedNan) return static_cast<Acc>(NAN);
  if (p.fully_masked == kFullyMaskedUniform) return Acc(1) / static_cast<Acc>(p.Lk);
  return Acc(0);
}
// lse of such a row: log(sum_j exp(fill)) = fill + log(Lk) with a finite fill, -inf otherwise.
template <class Acc>
__device__ inline Acc fully_masked_lse(const AttnParams& p) {
  return p.fill_finite ? static_cast<Acc>(p.fill_value) + ac_log(static_cast<Acc>(p.Lk)) : neg_inf<Acc>();
}

}  // inline namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
