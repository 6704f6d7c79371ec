// Hypotheses about serving caches: a quantized KV cache read with its scales dropped or taken from the wrong group
// (vllm PR #51363: per-head fp8 descales dropped; rocm-libraries PR #10474: every group reading group 0's scales),
// and a top-k index list whose padding slot (-1) is read as a key (key 0, or the last key as a negative index wraps).
// Each is the reference on the case the bug reads: the scales changed, or the keys it lets through as one boolean
// mask.
#include <array>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

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

}  // namespace

void cache_hypotheses(Scorer& sc) {
  const prop::Case& c = sc.s.c;
  const Problem& p = c.p;
  if (p.kv_quantized() && c.in.k_scale && c.in.v_scale) descale_hypotheses(sc, c);
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
