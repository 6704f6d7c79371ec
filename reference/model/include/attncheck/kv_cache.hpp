// A quantized KV cache, described once: k and v hold codes (int8, fp8 e4m3/e5m2) whose values are code * scale,
// with one scale per tensor, per (batch, KV head), per (batch, KV head, token) or per block of kv_block head-dim
// elements of a token (Problem::kv_scales). Its rules, the scale tensors' shapes, the exact decoding the reference
// uses and the producer that quantises values (generator, tests, power grid) all live here.
//
// 4-bit codes (kv_dtype q4_0 / q4_1) are llama.cpp's block_q4_0 / block_q4_1 with the block's fp16 d held apart in
// k_scale / v_scale (and q4_1's fp16 m in k_min / v_min), so they are the block granularity with kv_block 32 and
// fp16 scales: value = d * (q - 8) (q4_0) or d * q + m (q4_1), q in 0..15. Two codes per byte, in llama.cpp's order
// (ggml-quants.c, quantize_row_q4_0_ref / dequantize_row_q4_0): element i < 16 of a block in the low nibble of the
// block's byte i, element i + 16 in the high nibble of byte i. That order is chosen so a block's 16 bytes are
// byte-for-byte llama.cpp's qs[] (a kernel ported from ggml reads them unchanged). k and v hold those bytes: the
// tensors' last extent is D/2, and an element of them is a byte (DType::q4_0 / q4_1).
#pragma once

#include <cstdint>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace model {

// The largest finite code magnitude of a code format: 127 (int8), 448 (e4m3), 57344 (e5m2), 7 (q4_0's q - 8 as a
// producer uses it: symmetric), 15 (q4_1's q).
double kv_code_max(DType codes);
inline constexpr int64_t kQ4Block = 32;  // QK4_0 = QK4_1 = 32: elements per block and per 16 bytes of nibbles
// The byte of a row holding element e of that row, and whether e is in its high nibble (the order above).
inline int64_t q4_byte(int64_t e) { return e / kQ4Block * (kQ4Block / 2) + e % (kQ4Block / 2); }
inline bool q4_high(int64_t e) { return e % kQ4Block >= kQ4Block / 2; }
inline int q4_nibble(uint8_t byte, bool high) { return high ? byte >> 4 : byte & 15; }
// The dtype k (which = 1) or v (2) is stored in: kv_dtype for a quantized cache, else the problem's dtype.
inline DType kv_storage_dtype(const Problem& p) { return p.kv_quantized() ? p.kv_dtype : p.dtype; }
// Whether the scales (and q4_1's mins) of a paged cache sit in the pages beside their codes: per-token and per-block.
inline bool kv_scales_in_pages(const Problem& p) {
  return p.page_size > 0 && (p.kv_scales == KvScales::token || p.kv_scales == KvScales::block);
}
// Logical shape of k_scale (which = 1) or v_scale (2): [B|1, Hkv|1, Lk|1, D/kv_block|1], 1 where the granularity
// shares one scale (tensor [1,1,1,1], head [B,Hkv,1,1], token [B,Hkv,Lk,1], block [B,Hkv,Lk,D/kv_block]); in a
// paged cache per-token and per-block scales have the pages' shape [num_pages, Hkv, page_size, 1|D/kv_block].
std::vector<int64_t> kv_scale_shape(const Problem& p, int which);
Tensor make_kv_scale(const Problem& p, int which);  // contiguous, kv_scale_dtype, zero-filled
// The scale of element (b, h, j, d) of k or v (s = its scale tensor; q4_1's min tensor alike).
inline double kv_scale_at(const Problem& p, const Tensor& s, int64_t b, int64_t h, int64_t j, int64_t d) {
  return s.get_offset(broadcast_offset(s, b, h, j, d / p.kv_block));
}
// The code of element (b, h, j, d) of the codes tensor t as the number the scale multiplies: the int8 or fp8
// code's value, q - 8 (q4_0) or q (q4_1).
double kv_code_at(const Problem& p, const Tensor& t, int64_t b, int64_t h, int64_t j, int64_t d);
// The value of element (b, h, j, d) of k (which = 1) or v (2): code * scale (+ min for q4_1), in double (exact:
// a code has at most 8 significant bits, a scale 24; q4_1's d * q + m with fp16 d and m spans at most 45 bits).
double kv_value_at(const Problem& p, const Inputs& in, int which, int64_t b, int64_t h, int64_t j, int64_t d);
// Cross-field rules (validate(Problem) calls this): throws naming the field and the values.
void validate_kv_cache(const Problem& p);
// Every scale finite and > 0 (q4_0's d finite and nonzero: llama.cpp writes d = max / -8, signed), every q4_1 min
// finite (validate(Problem, Inputs) calls this): throws naming the tensor, index and value.
void validate_kv_scales(const Problem& p, const Inputs& in);
// The cache's values as a plain problem in `to` (q, k, v in `to`, no kv_scales): each value is code * scale
// computed in double and rounded once to `to` (exact for f64: a code has at most 8 significant bits, a scale 24).
// The identity without a quantized cache.
Attended dequantize_kv(const Problem& p, const Inputs& in, DType to);
// The producer, as a serving stack quantises its cache: k and v of `in` hold values (any float dtype, logical
// [B,Hkv,Lk,D]); each scale group gets scale = (its largest finite |value| / kv_code_max) * (1 + 2^-7), rounded to
// kv_scale_dtype (the factor keeps every value inside the code range after that rounding; a group with no finite
// nonzero value gets 3/256), and each value becomes value / scale rounded once to the code format (a NaN stays
// NaN in fp8 and becomes 0 in int8, which has none). Replaces k and v by the codes and sets k_scale and v_scale.
// q4_0: d as above with range 7 (codes -7..7, q = code + 8, NaN as q 8). q4_1 (as llama.cpp's, d > 0): m = the
// block's smallest finite value rounded to fp16, d = (largest - m) / 15 * (1 + 2^-7) rounded to fp16, q = (value -
// m) / d rounded and clamped to 0..15 (NaN as 0); sets k_min and v_min too.
void quantize_kv(const Problem& p, Inputs& in);

}  // namespace model
}  // namespace attncheck
