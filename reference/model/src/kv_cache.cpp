// The quantized KV cache (kv_cache.hpp): rules, scale shapes, exact decoding and the producer.
#include "attncheck/kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

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
    case DType::q4_0: return 7.0;  // symmetric like int8: q - 8 = -8 is not used by this producer
    case DType::q4_1: return 15.0;
    default: fail(std::string("kv_dtype must be int8, fp8_e4m3, fp8_e5m2, q4_0 or q4_1, got ") + to_string(codes));
  }
}

std::vector<int64_t> kv_scale_shape(const Problem& p, int which) {
  const int64_t D = which == 2 ? p.Dv : p.Dqk;
  const bool paged = kv_scales_in_pages(p);
  const int64_t rows = paged ? p.num_pages : p.B, tokens = paged ? p.page_size : p.Lk;
  switch (p.kv_scales) {
    case KvScales::none:
    case KvScales::tensor: return {1, 1, 1, 1};
    case KvScales::head: return {p.B, p.Hkv, 1, 1};
    case KvScales::token: return {rows, p.Hkv, tokens, 1};
    case KvScales::block: return {rows, p.Hkv, tokens, D / p.kv_block};
  }
  return {1, 1, 1, 1};
}

Tensor make_kv_scale(const Problem& p, int which) { return Tensor(p.kv_scale_dtype, kv_scale_shape(p, which)); }

double kv_code_at(const Problem& p, const Tensor& t, int64_t b, int64_t h, int64_t j, int64_t d) {
  if (!is_q4(p.kv_dtype)) return t.at(b, h, j, d);
  const int q = q4_nibble(static_cast<uint8_t>(t.at(b, h, j, q4_byte(d))), q4_high(d));
  return p.kv_dtype == DType::q4_0 ? q - 8 : q;
}

double kv_value_at(const Problem& p, const Inputs& in, int which, int64_t b, int64_t h, int64_t j, int64_t d) {
  const double x = kv_code_at(p, which == 1 ? in.k : in.v, b, h, j, d) *
                   kv_scale_at(p, which == 1 ? *in.k_scale : *in.v_scale, b, h, j, d);
  return p.kv_dtype == DType::q4_1 ? x + kv_scale_at(p, which == 1 ? *in.k_min : *in.v_min, b, h, j, d) : x;
}

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
  if (!p.cu_seqlens_q.empty()) fail(g + ": packed sequences (cu_seqlens_q) with a quantized cache are not modelled");
  // A serving cache holds keys already rotated (RoPE runs before the cache write), so rotating decoded codes at load
  // would model no kernel.
  if (uses_rope(p))
    fail(g + ": RoPE over a quantized cache is not modelled (the cache holds rotated keys), got rotary_dim=" +
         std::to_string(p.rotary_dim));
  if (uses_qk_norm(p)) fail(g + ": QK-norm over a quantized cache is not modelled (the cache holds normalised keys)");
  if (is_q4(p.kv_dtype)) {  // the format fixes its block and the type of d (and m)
    const std::string f = std::string("kv_dtype=") + to_string(p.kv_dtype);
    if (p.kv_scales != KvScales::block || p.kv_block != kQ4Block)
      fail(f + " needs kv_scales=block and kv_block=32 (one fp16 d per 32 head-dim elements), got " + g +
           ", kv_block=" + std::to_string(p.kv_block));
    if (p.kv_scale_dtype != DType::f16)
      fail(f + " needs kv_scale_dtype=fp16 (the format's d" + (p.kv_dtype == DType::q4_1 ? " and m" : "") +
           "), got kv_scale_dtype=" + to_string(p.kv_scale_dtype));
  }
  if (p.kv_scales == KvScales::block) {
    if (p.Dqk % p.kv_block != 0 || p.Dv % p.kv_block != 0)
      fail("kv_block must divide Dqk and Dv (whole blocks per token), got kv_block=" + std::to_string(p.kv_block) +
           ", Dqk=" + std::to_string(p.Dqk) + ", Dv=" + std::to_string(p.Dv));
  } else if (p.kv_block != d.kv_block) {
    fail("kv_block is only meaningful with kv_scales=block, got " + g + " and kv_block=" + std::to_string(p.kv_block));
  }
}

namespace {
// Per pool slot (page * page_size + token): whether the block table names it for some key (a paged cache's per-token
// and per-block scales are checked only there: a slot no key reads may hold anything, as in a serving pool).
std::vector<char> slots_read(const Problem& p) {
  std::vector<char> read(static_cast<size_t>(p.num_pages * p.page_size), 0);
  const int64_t n = p.pages_per_seq();
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t j = 0; j < p.Lk; ++j)
      read[static_cast<size_t>(p.block_table[static_cast<size_t>(b * n + j / p.page_size)] * p.page_size +
                               j % p.page_size)] = 1;
  return read;
}
}  // namespace

void validate_kv_scales(const Problem& p, const Inputs& in) {
  const bool pooled = kv_scales_in_pages(p);
  const std::vector<char> read = pooled ? slots_read(p) : std::vector<char>{};
  for (int which : {1, 2}) {
    const Tensor& s = which == 1 ? *in.k_scale : *in.v_scale;
    const std::vector<int64_t>& sh = s.shape;
    for (int64_t b = 0; b < sh[0]; ++b)
      for (int64_t h = 0; h < sh[1]; ++h)
        for (int64_t j = 0; j < sh[2]; ++j)
          for (int64_t g = 0; g < sh[3]; ++g) {
            if (pooled && !read[static_cast<size_t>(b * p.page_size + j)]) continue;
            const int64_t idx[4] = {b, h, j, g};
            const double x = s.get(idx);
            if (p.kv_dtype == DType::q4_0 ? !(std::isfinite(x) && x != 0) : !(std::isfinite(x) && x > 0))
              fail(std::string(which == 1 ? "k_scale" : "v_scale") + shape_string({b, h, j, g}) +
                   (p.kv_dtype == DType::q4_0 ? " must be finite and nonzero (q4_0's d)"
                                              : " must be finite and > 0 (" + std::string(to_string(p.kv_scales)) +
                                                    " scales of a quantized KV cache)") +
                   ", got " + std::to_string(x));
            if (p.kv_dtype != DType::q4_1) continue;
            const double m = (which == 1 ? *in.k_min : *in.v_min).get(idx);
            if (!std::isfinite(m))
              fail(std::string(which == 1 ? "k_min" : "v_min") + shape_string({b, h, j, g}) +
                   " must be finite (q4_1's m), got " + std::to_string(m));
          }
  }
}

Attended dequantize_kv(const Problem& p, const Inputs& in, DType to) {
  Attended a{p, in};
  if (!p.kv_quantized()) return a;
  const Problem d;
  a.p.kv_scales = KvScales::none, a.p.kv_dtype = d.kv_dtype, a.p.kv_block = d.kv_block;
  a.p.kv_scale_dtype = d.kv_scale_dtype, a.p.dtype = to;
  a.in.k_scale.reset(), a.in.v_scale.reset(), a.in.k_min.reset(), a.in.v_min.reset();
  a.in.q = make_qkv(a.p, 0);
  a.in.q.strides = in.q.strides;  // q's own strides (any permutation, not only the layout's): exact widening in place
  for (int64_t n = 0; n < in.q.numel(); ++n) a.in.q.set_offset(n, in.q.get_offset(n));
  for (int which : {1, 2}) {
    Tensor& t = which == 1 ? a.in.k : a.in.v;
    t = make_qkv(a.p, which);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t e = 0; e < t.shape[3]; ++e) t.put(b, h, j, e, kv_value_at(p, in, which, b, h, j, e));
  }
  return a;
}

namespace {
// q4_0 / q4_1 codes of values t (logical [B, Hkv, Lk, D]) with scales s (and mins m for q4_1) already set.
Tensor q4_codes(const Problem& p, const Tensor& t, const Tensor& s, const Tensor* m) {
  std::vector<int64_t> shape = t.shape;
  shape[3] /= 2;
  Tensor codes(p.kv_dtype, shape, storage_order(p.layout));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hkv; ++h)
      for (int64_t j = 0; j < p.Lk; ++j)
        for (int64_t e = 0; e < t.shape[3]; ++e) {
          const double x = t.at(b, h, j, e), d = kv_scale_at(p, s, b, h, j, e);
          const double c = m ? (x - kv_scale_at(p, *m, b, h, j, e)) / d : x / d + 8.0;
          const int q = std::isnan(c) ? (m ? 0 : 8) : static_cast<int>(std::nearbyint(std::clamp(c, 0.0, 15.0)));
          const int64_t at = q4_byte(e);
          const int byte = static_cast<int>(codes.at(b, h, j, at));
          codes.put(b, h, j, at, q4_high(e) ? (byte & 15) | q << 4 : (byte & 0xf0) | q);
        }
  return codes;
}

// q4_1's m per block: the smallest finite value, rounded to fp16 (0 for a block with none).
Tensor q4_mins(const Problem& p, const Tensor& t, int which) {
  Tensor m = make_kv_scale(p, which);
  std::vector<double> lo(static_cast<size_t>(m.numel()), std::numeric_limits<double>::infinity());
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hkv; ++h)
      for (int64_t j = 0; j < p.Lk; ++j)
        for (int64_t e = 0; e < t.shape[3]; ++e)
          if (const double x = t.at(b, h, j, e); std::isfinite(x)) {
            double& l = lo[size_t(broadcast_offset(m, b, h, j, e / p.kv_block))];
            l = std::min(l, x);
          }
  for (int64_t n = 0; n < m.numel(); ++n) m.set_offset(n, std::isfinite(lo[size_t(n)]) ? lo[size_t(n)] : 0.0);
  return m;
}
}  // namespace

void quantize_kv(const Problem& p, Inputs& in) {
  for (int which : {1, 2}) {
    Tensor& t = which == 1 ? in.k : in.v;
    Tensor s = make_kv_scale(p, which);
    const std::vector<int64_t> sh = s.shape;
    std::vector<double> amax(static_cast<size_t>(s.numel()), 0.0);
    auto group = [&](int64_t b, int64_t h, int64_t j, int64_t e) {
      return broadcast_offset(s, b, h, j, e / p.kv_block);
    };
    std::optional<Tensor> mins;  // q4_1: the range above m
    if (p.kv_dtype == DType::q4_1) mins = q4_mins(p, t, which);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t e = 0; e < t.shape[3]; ++e)
            if (const double x = t.at(b, h, j, e); std::isfinite(x)) {
              const double r = mins ? x - mins->get_offset(group(b, h, j, e)) : std::abs(x);
              amax[size_t(group(b, h, j, e))] = std::max(amax[size_t(group(b, h, j, e))], r);
            }
    for (int64_t n = 0; n < s.numel(); ++n) {
      double scale = round_to(p.kv_scale_dtype, amax[size_t(n)] / kv_code_max(p.kv_dtype) * (1.0 + 0x1p-7));
      if (!(scale > 0) || !std::isfinite(scale)) scale = round_to(p.kv_scale_dtype, 3.0 / 256.0);
      s.set_offset(n, scale);
    }
    if (is_q4(p.kv_dtype)) {
      t = q4_codes(p, t, s, mins ? &*mins : nullptr);
      (which == 1 ? in.k_scale : in.v_scale) = std::move(s);
      if (mins) (which == 1 ? in.k_min : in.v_min) = std::move(mins);
      continue;
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
