// What both attention kernels share, compiled by nvcc and by g++: the launch parameters (a plain struct of
// pointers and element strides), element conversion, the visibility rule of every mask kind and the score
// transform, in the reference's order: scale -> softcap -> +bias -> score modifications -> mask. The library
// modifications are evaluated by the reference's own functions (attncheck/mod_eval.hpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "attncheck/mod_eval.hpp"
#include "attncheck/rope_eval.hpp"
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
  int fill_finite;  // masked scores are fill_value and take part in the softmax; otherwise -inf
  double fill_value;
  int fully_masked;           // kFullyMasked*
  const unsigned char* keep;  // dropout keep-mask [B, Hq, Lq, Lk] or nullptr
  double keep_scale;          // 1 / (1 - p)
  void* max_logit;            // [B, Hq, Lq] max over visible scores (accumulation type), or nullptr
  const double* sinks;        // [Hq] sink logits (-inf: none for that head), or nullptr
  // Library modifications (mods.hpp), each off when its pointer is null or its size 0; pos = i + diag_offset[b].
  const double* alibi_slopes;  // [Hq] or [B, Hq] (alibi_per_batch)
  int alibi_per_batch;
  const double* t5_table;  // [Hq, t5_buckets]
  int64_t t5_buckets, t5_max_distance;
  int t5_bidirectional;
  const double* key_bias;  // [Hq, Lk] or [B, Hq, Lk] (key_bias_per_batch)
  int key_bias_per_batch;
  const int64_t* doc_ids;            // [B, Lk]
  int64_t chunk_size;                // 0: off
  const int64_t* prefix_lengths;     // [B]
  int64_t dilated_window, dilation;  // window -1: off
  const int64_t* topk_indices;       // [B, Lq, topk]
  int64_t topk;
  // The position stage, applied to q and k rows as they are loaded: QK-norm (off when a weight pointer is null),
  // then RoPE (off at rotary_dim 0) at the positions the host looked up (rope_query_at / rope_key_at): one per
  // token, or with mRoPE one per section, pair f taking its section's (rope_pair_section[f]).
  const double* q_norm_weight;  // [Dqk]
  const double* k_norm_weight;  // [Dqk]
  double qk_norm_eps;
  int64_t rotary_dim;
  int rotary_interleaved;
  const double* rope_inv_freq;   // [rotary_dim / 2], scaled, fp64 (rounded to the accumulation type in the kernels)
  double rope_factor;            // the attention factor cos and sin are multiplied with
  const int64_t* rope_q_pos;     // [B, Lq, rope_sections]
  const int64_t* rope_k_pos;     // [B, Lk, rope_sections]
  int64_t rope_sections;         // 1 without mRoPE
  const int* rope_pair_section;  // [rotary_dim / 2]; null without mRoPE (every pair in section 0)
  // A quantized KV cache (kv_cache.hpp): k and v hold one-byte codes whose values are code_values[code] * scale,
  // the product rounded once to the accumulation type; off when kv_code_values is null. The scales are indexed
  // (b, KV head, j, d / kv_block) with stride 0 on the dims their granularity shares.
  const double* kv_code_values;  // [256]: each byte's value (int8 two's complement, fp8 decoded by the reference)
  const double* k_scale;
  const double* v_scale;
  int64_t k_scale_stride[4], v_scale_stride[4];
  int64_t kv_block;
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
__device__ inline float ac_cos(float x) { return cosf(x); }
__device__ inline double ac_cos(double x) { return cos(x); }
__device__ inline float ac_sin(float x) { return sinf(x); }
__device__ inline double ac_sin(double x) { return sin(x); }

template <class Acc>
__device__ inline Acc neg_inf() {
  return -static_cast<Acc>(INFINITY);
}

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
__device__ inline void store_as<float>(void* base, int64_t off, float x) {
  gstore(static_cast<float*>(base), off, x);
}
template <>
__device__ inline void store_as<double>(void* base, int64_t off, double x) {
  gstore(static_cast<double*>(base), off, x);
}
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

// Element (b, h, j, d) of k or v (base, strides, scales) widened to the accumulation type. A quantized cache's code
// times its group's scale: both exact in the accumulation type (a code has at most 8 significant bits, a scale at
// most 24), so the product is rounded once, as the reference's dequantised cache rounded to that type.
template <class T>
__device__ inline typename AccOf<T>::type load_kv(const AttnParams& p, const void* base, const int64_t* stride,
                                                  const double* scale, const int64_t* scale_stride, int b, int h,
                                                  int64_t j, int d) {
  using Acc = typename AccOf<T>::type;
  const int64_t off = offset4(stride, b, h, j, d);
  if (!p.kv_code_values) return load_as<T>(base, off);
  const unsigned char code = gload(static_cast<const unsigned char*>(base), off);
  return static_cast<Acc>(gload(p.kv_code_values, static_cast<int64_t>(code))) *
         static_cast<Acc>(gload(scale, offset4(scale_stride, b, h, j, d / p.kv_block)));
}
template <class T>
__device__ inline typename AccOf<T>::type load_k(const AttnParams& p, int b, int h, int64_t j, int d) {
  return load_kv<T>(p, p.k, p.k_stride, p.k_scale, p.k_scale_stride, b, h, j, d);
}
template <class T>
__device__ inline typename AccOf<T>::type load_v(const AttnParams& p, int b, int h, int64_t j, int d) {
  return load_kv<T>(p, p.v, p.v_stride, p.v_scale, p.v_scale_stride, b, h, j, d);
}

// The reference's max: a NaN candidate never replaces the running value (std::max(m, s) == (m < s ? s : m)).
template <class Acc>
__device__ inline Acc max_keep(Acc m, Acc s) {
  return m < s ? s : m;
}

// The mask modifications of the library (the query at key position pos = diag).
__device__ inline bool mods_visible(const AttnParams& p, int b, int64_t i, int64_t j, int64_t pos) {
  namespace me = mod_eval;
  if (p.doc_ids) {
    const int64_t* ids = p.doc_ids + static_cast<int64_t>(b) * p.Lk;
    if (!me::document(pos, j, p.Lk, [ids](int64_t k) { return gload(ids, k); })) return false;
  }
  if (p.chunk_size > 0 && !me::chunked(pos, j, p.chunk_size)) return false;
  if (p.prefix_lengths && !me::prefix_lm(pos, j, gload(p.prefix_lengths, b))) return false;
  if (p.dilated_window >= 0 && !me::dilated(pos, j, p.dilated_window, p.dilation)) return false;
  if (p.topk > 0) {
    const int64_t* slots = p.topk_indices + (static_cast<int64_t>(b) * p.Lq + i) * p.topk;
    if (!me::topk_listed(j, p.topk, [slots](int64_t s) { return gload(slots, s); })) return false;
  }
  return true;
}

// The score modifications of the library, in its order (ALiBi, T5, per-key bias), each in fp64 and rounded once,
// as the CPU implementations evaluate them.
template <class Acc>
__device__ inline Acc mods_score(const AttnParams& p, Acc s, int b, int h, int64_t pos, int64_t j) {
  if (!p.alibi_slopes && p.t5_buckets == 0 && !p.key_bias) return s;
  double x = static_cast<double>(s);
  if (p.alibi_slopes)
    x = mod_eval::alibi(x, gload(p.alibi_slopes, p.alibi_per_batch ? static_cast<int64_t>(b) * p.Hq + h : h), pos, j);
  if (p.t5_buckets > 0)
    x += gload(p.t5_table, static_cast<int64_t>(h) * p.t5_buckets +
                               mod_eval::t5_bucket(p.t5_buckets, p.t5_max_distance, p.t5_bidirectional != 0, j - pos));
  if (p.key_bias) x += gload(p.key_bias, ((p.key_bias_per_batch ? static_cast<int64_t>(b) * p.Hq : 0) + h) * p.Lk + j);
  return static_cast<Acc>(x);
}

// A mask that can hide keys inside a row's causal/window/padding span (a boolean mask, a mask modification): the
// fused kernel then tests each key tile for a visible key before loading it, as block-sparse kernels skip blocks.
__device__ inline bool masks_inside_span(const AttnParams& p) {
  return p.mask || p.doc_ids || p.chunk_size > 0 || p.prefix_lengths || p.dilated_window >= 0 || p.topk > 0;
}

// The position stage (QK-norm, then RoPE) on q and k, with the reference's per-element arithmetic
// (rope_eval.hpp): the norm in fp64 and rounded once to the accumulation type, the rotation in the accumulation
// type with the angle pos * inv_freq rounded to it (fp32: the contract's rope=fp32-angles).
__device__ inline bool uses_position_stage(const AttnParams& p) {
  return p.q_norm_weight || p.k_norm_weight || p.rotary_dim > 0;
}

// QK-norm's factor of one row whose element e is x(e) (1 without weights), summed in the reference's order.
template <class X>
__device__ inline double row_norm_scale(const AttnParams& p, const double* w, const X& x) {
  if (!w) return 1.0;
  double ss = 0;
  for (int e = 0; e < p.Dqk; ++e) {
    const double v = static_cast<double>(x(e));
    ss += v * v;
  }
  return rope_eval::rms_scale(ss, p.Dqk, p.qk_norm_eps);
}
template <class Acc>
__device__ inline Acc normed(const double* w, Acc x, double r, int e) {
  return w ? static_cast<Acc>(static_cast<double>(x) * r * gload(w, e)) : x;
}
// cos and sin of pair f for the token whose positions start at element `pos` of a position table: the position
// of f's mRoPE section.
template <class Acc>
__device__ inline void rope_angle(const AttnParams& p, int64_t f, const int64_t* table, int64_t pos, Acc& c, Acc& s) {
  const int64_t section = p.rope_pair_section ? gload(p.rope_pair_section, f) : 0;
  const Acc t = static_cast<Acc>(gload(table, pos + section)) * static_cast<Acc>(gload(p.rope_inv_freq, f));
  c = ac_cos(t);
  s = ac_sin(t);
}

// Element d of a staged row whose raw element e is x(e), QK-norm factor r, positions from element pos of the
// position table (kernel 1: each lane computes the elements of its own key).
template <class Acc, class X>
__device__ inline Acc staged_elem(const AttnParams& p, const double* w, const X& x, double r, const int64_t* table,
                                  int64_t pos, int d) {
  if (d >= p.rotary_dim) return normed(w, x(d), r, d);
  const bool gptj = p.rotary_interleaved != 0;
  const int64_t f = rope_eval::pair_of(d, p.rotary_dim, gptj);
  const rope_eval::PairDims pd = rope_eval::pair_dims(f, p.rotary_dim, gptj);
  Acc xa = normed(w, x(static_cast<int>(pd.a)), r, static_cast<int>(pd.a));
  Acc xb = normed(w, x(static_cast<int>(pd.b)), r, static_cast<int>(pd.b));
  Acc c, s;
  rope_angle(p, f, table, pos, c, s);
  rope_eval::rotate(xa, xb, c, s, static_cast<Acc>(p.rope_factor));
  return d == pd.a ? xa : xb;
}

// Where the RoPE positions of query row i and of key j of batch b start in rope_q_pos / rope_k_pos.
__device__ inline int64_t rope_query_pos(const AttnParams& p, int b, int64_t i) {
  return (static_cast<int64_t>(b) * p.Lq + i) * p.rope_sections;
}
__device__ inline int64_t rope_key_pos(const AttnParams& p, int b, int64_t j) {
  return (static_cast<int64_t>(b) * p.Lk + j) * p.rope_sections;
}

// A row of Dqk values in shared memory staged in place by one warp (kernel 2): every lane sums the squares (the
// same factor in each), then normalises its own dims and rotates its own pairs.
template <class Acc>
__device__ inline void stage_row(const AttnParams& p, const double* w, Acc* x, int lane, const int64_t* table,
                                 int64_t pos) {
  const double r = row_norm_scale(p, w, [x](int e) { return x[e]; });
  __syncwarp();  // every lane has read the row
  if (w)
    for (int d = lane; d < p.Dqk; d += 32) x[d] = normed(w, x[d], r, d);
  __syncwarp();
  const bool gptj = p.rotary_interleaved != 0;
  for (int64_t f = lane; f < p.rotary_dim / 2; f += 32) {
    const rope_eval::PairDims pd = rope_eval::pair_dims(f, p.rotary_dim, gptj);
    Acc c, s;
    rope_angle(p, f, table, pos, c, s);
    rope_eval::rotate(x[pd.a], x[pd.b], c, s, static_cast<Acc>(p.rope_factor));
  }
  __syncwarp();
}

// Is key j visible to query i of (b, h)? `diag` = i + diag_offset[b], `valid` = key_length[b].
__device__ inline bool key_visible(const AttnParams& p, int b, int h, int64_t i, int64_t j, int64_t diag,
                                   int64_t valid) {
  if (j >= valid) return false;                                                        // key padding
  if (p.causal && j > diag) return false;                                              // causal: j <= i + offset
  if (p.window_left >= 0 && j < diag - p.window_left) return false;                    // window, left edge
  if (p.window_right >= 0 && j > diag + p.window_right) return false;                  // window, right edge
  if (p.mask && gload(p.mask, offset4(p.mask_stride, b, h, i, j)) == 0) return false;  // boolean mask
  return mods_visible(p, b, i, j, diag);
}

// The logit stage of the scaled score s (softcap: c·tanh(s/c)); `chain`, when given, receives its derivative as a
// backward forms it from the tanh t it keeps, 1 - t² (as FlashAttention does).
template <class Acc>
__device__ inline Acc logit_stage(const AttnParams& p, Acc s, Acc* chain = nullptr) {
  if (!(p.softcap > 0)) return s;
  const Acc c = static_cast<Acc>(p.softcap);
  const Acc t = ac_tanh(s / c);
  if (chain) *chain = Acc(1) - t * t;
  return c * t;
}

// scale -> softcap -> + bias -> score modifications, for a visible key whose dot product is `dot`.
template <class Acc>
__device__ inline Acc transform_score(const AttnParams& p, Acc dot, int b, int h, int64_t i, int64_t j, int64_t diag) {
  Acc s = logit_stage(p, dot * static_cast<Acc>(p.scale));
  if (p.bias) s += gload(static_cast<const Acc*>(p.bias), offset4(p.bias_stride, b, h, i, j));
  return mods_score(p, s, b, h, diag, j);
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

// The sink logit of head h (joins the softmax denominator, has no value): -inf without sinks.
template <class Acc>
__device__ inline Acc sink_logit(const AttnParams& p, int h) {
  return p.sinks ? static_cast<Acc>(gload(p.sinks, h)) : neg_inf<Acc>();
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

}  // namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
