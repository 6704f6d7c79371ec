// Hypotheses about serving caches: a quantized KV cache read with its scales dropped or taken from the wrong group
// (vllm PR #51363: per-head fp8 descales dropped; rocm-libraries PR #10474: every group reading group 0's scales), a
// 4-bit cache (llama.cpp's q4_0 / q4_1) with a byte's nibbles read the other way round, q4_0's offset 8 or q4_1's
// min forgotten, or each block reading the next block's scales, and a top-k index list whose padding slot (-1) is
// read as a key (key 0, or the last key as a negative index wraps). Each is the reference on the case the bug reads:
// the scales changed, the cache's values as the bug decodes them, or the keys it lets through as one boolean mask.
#include <array>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attncheck/kv_cache.hpp"
#include "hypotheses.hpp"

namespace attncheck::diagnose {

namespace {

// k_scale and v_scale of d rewritten by f(scale tensor, b, h, t, g) at every element (the scales' own indices).
template <class F>
prop::Case with_scales(const prop::Case& c, bool keys, bool values, F f) {
  prop::Case d = c;
  for (auto [on, t] : {std::pair{keys, &d.in.k_scale}, std::pair{values, &d.in.v_scale}}) {
    if (!on || !*t) continue;
    const Tensor original = **t;
    const std::vector<int64_t>& n = original.shape;
    for (int64_t b = 0; b < n[0]; ++b)
      for (int64_t h = 0; h < n[1]; ++h)
        for (int64_t j = 0; j < n[2]; ++j)
          for (int64_t g = 0; g < n[3]; ++g) (*t)->put(b, h, j, g, f(original, b, h, j, g));
  }
  validate(d.p, d.in);
  return d;
}

void descale_hypotheses(Scorer& sc, const prop::Case& c) {
  for (auto [keys, values, which] :
       {std::tuple{true, true, "k and v"}, std::tuple{true, false, "k"}, std::tuple{false, true, "v"}})
    sc.variant("descale-ignored",
               std::string("quantized KV cache: the scales of ") + which + " dropped (codes read as values)", [&] {
                 return with_scales(c, keys, values,
                                    [](const Tensor&, int64_t, int64_t, int64_t, int64_t) { return 1.0; });
               });
  // One group's scale read for every group along an axis of the scales that has more than one.
  const std::array<const char*, 4> axis = {"batch", "KV head", "token", "head-dim block"};
  const std::vector<int64_t>& n = c.in.k_scale->shape;
  for (int a = 0; a < 4; ++a) {
    if (n[size_t(a)] < 2) continue;
    sc.variant(
        "descale-wrong-group",
        std::string("quantized KV cache: every ") + axis[size_t(a)] + " reads the scale of " + axis[size_t(a)] + " 0",
        [&] {
          return with_scales(c, true, true, [a](const Tensor& s, int64_t b, int64_t h, int64_t j, int64_t g) {
            std::array<int64_t, 4> at = {b, h, j, g};
            at[size_t(a)] = 0;
            return s.at(at[0], at[1], at[2], at[3]);
          });
        });
  }
}

// The cache as a plain fp64 cache of the values a misreading kernel decodes: value(which, b, h, j, e) for k (1) and
// v (2); q unchanged (exact in fp64).
template <class F>
prop::Case with_decoded(const prop::Case& c, F value) {
  const Attended plain = dequantize_kv(c.p, c.in, DType::f64);
  prop::Case d = c;
  d.p = plain.p, d.in = plain.in;
  for (int which : {1, 2}) {
    Tensor& t = which == 1 ? d.in.k : d.in.v;
    for (int64_t b = 0; b < t.shape[0]; ++b)
      for (int64_t h = 0; h < t.shape[1]; ++h)
        for (int64_t j = 0; j < t.shape[2]; ++j)
          for (int64_t e = 0; e < t.shape[3]; ++e) t.put(b, h, j, e, value(which, b, h, j, e));
  }
  validate(d.p, d.in);
  return d;
}

void q4_hypotheses(Scorer& sc, const prop::Case& c) {
  const Problem& p = c.p;
  const bool q4_1 = p.kv_dtype == DType::q4_1;
  const int64_t G = p.kv_block;
  // code * scale (+ min) with the code of element `ce` and the scales of element (sj, se)
  auto decode = [&c, &p, q4_1](int which, int64_t b, int64_t h, int64_t j, int64_t ce, int64_t sj, int64_t se,
                               double offset, bool with_min) {
    const Tensor& codes = which == 1 ? c.in.k : c.in.v;
    const Tensor& s = which == 1 ? *c.in.k_scale : *c.in.v_scale;
    const std::optional<Tensor>& mins = which == 1 ? c.in.k_min : c.in.v_min;
    const double m = q4_1 && with_min && mins ? kv_scale_at(p, *mins, b, h, sj, se) : 0.0;
    return (kv_code_at(p, codes, b, h, j, ce) + offset) * kv_scale_at(p, s, b, h, sj, se) + m;
  };
  sc.variant("q4-nibble-order",
             "4-bit cache: a byte's two nibbles read the other way round (element i of a block from the high nibble of "
             "byte i, i + " +
                 std::to_string(G / 2) + " from its low one)",
             [&] {
               return with_decoded(c, [&](int w, int64_t b, int64_t h, int64_t j, int64_t e) {
                 return decode(w, b, h, j, e ^ (G / 2), j, e, 0.0, true);
               });
             });
  if (!q4_1)
    sc.variant("q4-offset", "4-bit cache: q4_0's offset 8 forgotten (d q read for d (q - 8))", [&] {
      return with_decoded(
          c, [&](int w, int64_t b, int64_t h, int64_t j, int64_t e) { return decode(w, b, h, j, e, j, e, 8.0, true); });
    });
  else
    sc.variant("q4-min-ignored", "4-bit cache: q4_1's min m ignored (d q read for d q + m)", [&] {
      return with_decoded(c, [&](int w, int64_t b, int64_t h, int64_t j, int64_t e) {
        return decode(w, b, h, j, e, j, e, 0.0, false);
      });
    });
  // every block reading the d (and m) of the next block in memory: a token's last block reads the next token's first
  sc.variant("descale-wrong-group",
             "4-bit cache: every block reads the scales of the next block (block index off by one)", [&] {
               return with_decoded(c, [&](int w, int64_t b, int64_t h, int64_t j, int64_t e) {
                 const int64_t E = w == 1 ? p.Dqk : p.Dv;
                 int64_t sj = j, se = e + G;
                 if (se >= E) se = j + 1 < p.Lk ? e % G : e, sj = j + 1 < p.Lk ? j + 1 : j;
                 return decode(w, b, h, j, e, sj, se, 0.0, true);
               });
             });
}

}  // namespace

void cache_hypotheses(Scorer& sc) {
  const prop::Case& c = sc.s.c;
  const Problem& p = c.p;
  if (p.kv_quantized() && c.in.k_scale && c.in.v_scale) descale_hypotheses(sc, c);
  if (p.kv_quantized() && is_q4(p.kv_dtype) && p.kv_scales == KvScales::block && c.in.k_scale && c.in.v_scale)
    q4_hypotheses(sc, c);
  if (p.topk > 0 && static_cast<int64_t>(p.topk_indices.size()) == p.B * p.Lq * p.topk) {
    auto padded = [&p](int64_t b, int64_t i) {  // the row's list ends in padding
      return p.topk_indices[static_cast<size_t>((b * p.Lq + i + 1) * p.topk - 1)] == -1;
    };
    for (const int64_t key : {int64_t{0}, p.Lk - 1})
      add_visibility(
          sc, "topk-padding",
          "top-k sparse: a padding slot (-1) read as key " + std::to_string(key) +
              (key == 0 ? "" : " (a negative index wrapping to the last key)"),
          [&](int64_t b, int64_t, int64_t i, int64_t j, bool vis) { return vis || (j == key && padded(b, i)); });
  }
}

}  // namespace attncheck::diagnose
