// A quantized KV cache, described once: k and v hold codes (int8, fp8 e4m3/e5m2) whose values are code * scale,
// with one scale per tensor, per (batch, KV head), per (batch, KV head, token) or per block of kv_block head-dim
// elements of a token (Problem::kv_scales). Its rules, the scale tensors' shapes, the exact decoding the reference
// uses and the producer that quantises values (generator, tests, power grid) all live here.
#pragma once

#include <cstdint>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace model {

// The largest finite code magnitude of a code format: 127 (int8), 448 (e4m3), 57344 (e5m2).
double kv_code_max(DType codes);
// The dtype k (which = 1) or v (2) is stored in: kv_dtype for a quantized cache, else the problem's dtype.
inline DType kv_storage_dtype(const Problem& p) { return p.kv_quantized() ? p.kv_dtype : p.dtype; }
// Logical shape of k_scale (which = 1) or v_scale (2): [B|1, Hkv|1, Lk|1, D/kv_block|1], 1 where the granularity
// shares one scale (tensor [1,1,1,1], head [B,Hkv,1,1], token [B,Hkv,Lk,1], block [B,Hkv,Lk,D/kv_block]).
std::vector<int64_t> kv_scale_shape(const Problem& p, int which);
Tensor make_kv_scale(const Problem& p, int which);  // contiguous, kv_scale_dtype, zero-filled
// The scale of element (b, h, j, d) of k or v (s = its scale tensor).
inline double kv_scale_at(const Problem& p, const Tensor& s, int64_t b, int64_t h, int64_t j, int64_t d) {
  return s.get_offset(broadcast_offset(s, b, h, j, d / p.kv_block));
}
// Cross-field rules (validate(Problem) calls this): throws naming the field and the values.
void validate_kv_cache(const Problem& p);
// Every scale finite and > 0 (validate(Problem, Inputs) calls this): throws naming the tensor, index and value.
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
void quantize_kv(const Problem& p, Inputs& in);

}  // namespace model
}  // namespace attncheck
