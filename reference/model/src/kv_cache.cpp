// The quantized KV cache (kv_cache.hpp): rules, scale shapes, exact decoding and the producer.
#include "attncheck/kv_cache.hpp"

#include <algorithm>
#include <cmath>

#include "attncheck/rope.hpp"
#include "detail.hpp"

namespace attncheck {
inline namespace model {

using detail::fail;

double kv_code_max(DType codes) {
  switch (codes) {
    case DType::i8: return 127.0;  // symmetric: -128 is not used by a producer (q8_0 clamps to +-127)
    case DType::e4m3: return 448.0;
    case DType::e5m2: return 57344.0;
    default: fail(std::string("kv_dtype must be int8, fp8_e4m3 or fp8_e5m2, got ") + to_string(codes));
  }
}

std::vector<int64_t> kv_scale_shape(const Problem& p, int which) {
  const int64_t D = which == 2 ? p.Dv : p.Dqk;
  switch (p.kv_scales) {
    case KvScales::none:
    case KvScales::tensor: return {1, 1, 1, 1};
    case KvScales::head: return {p.B, p.Hkv, 1, 1};
    case KvScales::token: return {p.B, p.Hkv, p.Lk, 1};
    case KvScales::block: return {p.B, p.Hkv, p.Lk, D / p.kv_block};
  }
  return {1, 1, 1, 1};
}

Tensor make_kv_scale(const Problem& p, int which) { return Tensor(p.kv_scale_dtype, kv_scale_shape(p, which)); }

void validate_kv_cache(const Problem& p) {
  const Problem d;
  if (!p.kv_quantized()) {
    if (p.kv_dtype != d.kv_dtype || p.kv_block != d.kv_block || p.kv_scale_dtype != d.kv_scale_dtype)
      fail(std::string(
               "kv_dtype, kv_block and kv_scale_dtype need kv_scales (a quantized KV cache), got kv_scales=none, "
               "kv_dtype=") +
           to_string(p.kv_dtype) + ", kv_block=" + std::to_string(p.kv_block) +
           ", kv_scale_dtype=" + to_string(p.kv_scale_dtype));
    return;
  }
  const std::string g = std::string("kv_scales=") + to_string(p.kv_scales);
  if (p.dtype != DType::f64 && p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    fail(g + ": q must be fp64, fp32, fp16 or bf16 with a quantized KV cache, got dtype=" + to_string(p.dtype));
  if (p.past_len > 0)
    fail(g + ": KV-cache append into a quantized cache is not modelled (past_len=" + std::to_string(p.past_len) + ")");
  if (p.page_size > 0)
    fail(g + ": a paged quantized cache is not modelled (page_size=" + std::to_string(p.page_size) + ")");
  if (!p.cu_seqlens_q.empty()) fail(g + ": packed sequences (cu_seqlens_q) with a quantized cache are not modelled");
  // A serving cache holds keys already rotated (RoPE runs before the cache write), so rotating decoded codes at load
  // would model no kernel.
  if (uses_rope(p))
    fail(g + ": RoPE over a quantized cache is not modelled (the cache holds rotated keys), got rotary_dim=" +
         std::to_string(p.rotary_dim));
  if (uses_qk_norm(p)) fail(g + ": QK-norm over a quantized cache is not modelled (the cache holds normalised keys)");
  if (p.kv_scales == KvScales::block) {
    if (p.Dqk % p.kv_block != 0 || p.Dv % p.kv_block != 0)
      fail("kv_block must divide Dqk and Dv (whole blocks per token), got kv_block=" + std::to_string(p.kv_block) +
           ", Dqk=" + std::to_string(p.Dqk) + ", Dv=" + std::to_string(p.Dv));
  } else if (p.kv_block != d.kv_block) {
    fail("kv_block is only meaningful with kv_scales=block, got " + g + " and kv_block=" + std::to_string(p.kv_block));
  }
}

void validate_kv_scales(const Problem& p, const Inputs& in) {
  for (int which : {1, 2}) {
    const Tensor& s = which == 1 ? *in.k_scale : *in.v_scale;
    const std::vector<int64_t>& sh = s.shape;
    for (int64_t b = 0; b < sh[0]; ++b)
      for (int64_t h = 0; h < sh[1]; ++h)
        for (int64_t j = 0; j < sh[2]; ++j)
          for (int64_t g = 0; g < sh[3]; ++g) {
            const int64_t idx[4] = {b, h, j, g};
            const double x = s.get(idx);
            if (!(std::isfinite(x) && x > 0))
              fail(std::string(which == 1 ? "k_scale" : "v_scale") + shape_string({b, h, j, g}) +
                   " must be finite and > 0 (" + to_string(p.kv_scales) + " scales of a quantized KV cache), got " +
                   std::to_string(x));
          }
  }
}

Attended dequantize_kv(const Problem& p, const Inputs& in, DType to) {
  Attended a{p, in};
  if (!p.kv_quantized()) return a;
  const Problem d;
  a.p.kv_scales = KvScales::none, a.p.kv_dtype = d.kv_dtype, a.p.kv_block = d.kv_block;
  a.p.kv_scale_dtype = d.kv_scale_dtype, a.p.dtype = to;
  a.in.k_scale.reset(), a.in.v_scale.reset();
  a.in.q = make_qkv(a.p, 0);
  a.in.q.strides = in.q.strides;  // q's own strides (any permutation, not only the layout's): exact widening in place
  for (int64_t n = 0; n < in.q.numel(); ++n) a.in.q.set_offset(n, in.q.get_offset(n));
  for (int which : {1, 2}) {
    const Tensor& codes = which == 1 ? in.k : in.v;
    const Tensor& s = which == 1 ? *in.k_scale : *in.v_scale;
    Tensor& t = which == 1 ? a.in.k : a.in.v;
    t = make_qkv(a.p, which);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t e = 0; e < t.shape[3]; ++e)
            t.put(b, h, j, e, codes.at(b, h, j, e) * kv_scale_at(p, s, b, h, j, e));
  }
  return a;
}

void quantize_kv(const Problem& p, Inputs& in) {
  for (int which : {1, 2}) {
    Tensor& t = which == 1 ? in.k : in.v;
    Tensor s = make_kv_scale(p, which);
    const std::vector<int64_t> sh = s.shape;
    std::vector<double> amax(static_cast<size_t>(s.numel()), 0.0);
    auto group = [&](int64_t b, int64_t h, int64_t j, int64_t e) {
      return broadcast_offset(s, b, h, j, e / p.kv_block);
    };
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t e = 0; e < t.shape[3]; ++e)
            if (const double x = t.at(b, h, j, e); std::isfinite(x))
              amax[size_t(group(b, h, j, e))] = std::max(amax[size_t(group(b, h, j, e))], std::abs(x));
    for (int64_t n = 0; n < s.numel(); ++n) {
      double scale = round_to(p.kv_scale_dtype, amax[size_t(n)] / kv_code_max(p.kv_dtype) * (1.0 + 0x1p-7));
      if (!(scale > 0) || !std::isfinite(scale)) scale = round_to(p.kv_scale_dtype, 3.0 / 256.0);
      s.set_offset(n, scale);
    }
    Tensor codes(p.kv_dtype, t.shape, storage_order(p.layout));
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t e = 0; e < t.shape[3]; ++e)
            codes.put(b, h, j, e, t.at(b, h, j, e) / s.get_offset(group(b, h, j, e)));
    t = std::move(codes);
    (which == 1 ? in.k_scale : in.v_scale) = std::move(s);
  }
}

}  // namespace model
}  // namespace attncheck
