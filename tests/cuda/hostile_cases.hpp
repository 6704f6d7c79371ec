// Hostile attention cases for the CUDA kernels: awkward lengths around the tile sizes (1, 15..17, 31..33, primes),
// odd head dims, signed inputs, large logits, all-equal rows, every mask kind and policy, dropout, GQA, BSHD,
// and NaN poison in K/V wherever no key should be read. Seeded: a case is reproducible from its name.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck::testcases {

struct Case {
  std::string label;  // what the case is about; the test name adds the problem's name
  Problem p;
  double amplitude = 1.0;        // inputs uniform in [-amplitude, amplitude]
  bool all_equal = false;        // every q = 0: all visible scores equal
  bool poison = true;            // NaN in K and V at keys no query may see
  bool negative_scores = false;  // q > 0, k < 0: every score is very negative (about -50)
};

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline double uniform_pm1(uint64_t& s) { return static_cast<double>(splitmix(s) >> 11) * 0x1.0p-52 - 1.0; }

// Inputs for a case, seeded from its name.
inline Inputs make_inputs(const Case& c) {
  const Problem& p = c.p;
  uint64_t s = std::hash<std::string>{}(c.label + p.name());
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  for (Tensor* t : {&in.q, &in.k, &in.v})
    for (int64_t n = 0; n < t->numel(); ++n) {
      double x = c.amplitude * uniform_pm1(s);
      if (c.all_equal && t == &in.q) x = 0.0;
      if (c.negative_scores && t == &in.q) x = 4.0;
      if (c.negative_scores && t == &in.k) x = -3.0 - std::abs(x);
      t->set_offset(n, x);
    }
  if (p.mask_shape) {
    const auto& ms = *p.mask_shape;
    in.mask = Tensor(DType::u8, {ms[0], ms[1], ms[2], ms[3]});
    for (int64_t n = 0; n < in.mask->numel(); ++n) in.mask->set_offset(n, uniform_pm1(s) > -0.4);  // ~70% visible
  }
  if (p.bias_shape) {
    const auto& bs = *p.bias_shape;
    in.bias = Tensor(p.bias_dtype, {bs[0], bs[1], bs[2], bs[3]});
    for (int64_t n = 0; n < in.bias->numel(); ++n) in.bias->set_offset(n, 2.0 * uniform_pm1(s));
  }
  if (p.dropout_p > 0) in.keep = make_keep_mask(p);
  if (c.poison) {
    // Padding keys are invisible to every query: poison their K and V (a kernel that reads them fails).
    const double nan = std::nan("");
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = p.key_length(b); j < p.Lk; ++j) {
          for (int64_t d = 0; d < p.Dqk; ++d) in.k.put(b, h, j, d, nan);
          for (int64_t d = 0; d < p.Dv; ++d) in.v.put(b, h, j, d, nan);
        }
  }
  return in;
}

inline std::vector<Case> hostile_cases() {
  std::vector<Case> cs;
  auto add = [&](std::string label, auto&& edit) {
    Case c;
    c.label = std::move(label);
    c.p.want_lse = true;
    edit(c);
    cs.push_back(c);
  };
  auto shape = [](Problem& p, int64_t B, int64_t Hq, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t Dqk, int64_t Dv) {
    p.B = B;
    p.Hq = Hq;
    p.Hkv = Hkv;
    p.Lq = Lq;
    p.Lk = Lk;
    p.Dqk = Dqk;
    p.Dv = Dv;
  };
  // Sizes around the tiles (BR = 4 rows, BC = 32 or 16 keys), primes, single tokens, odd and large head dims.
  add("single", [&](Case& c) { shape(c.p, 1, 1, 1, 1, 1, 1, 1); });
  add("tile-minus-1", [&](Case& c) { shape(c.p, 1, 2, 2, 3, 31, 8, 8); });
  add("tile", [&](Case& c) { shape(c.p, 1, 1, 1, 4, 32, 16, 16); });
  add("tile-plus-1", [&](Case& c) { shape(c.p, 2, 1, 1, 5, 33, 16, 16); });
  add("primes-gqa", [&](Case& c) { shape(c.p, 2, 6, 2, 13, 67, 24, 20); });
  add("odd-dims", [&](Case& c) { shape(c.p, 1, 3, 1, 9, 17, 3, 5); });
  add("d160-bc16", [&](Case& c) { shape(c.p, 1, 2, 1, 6, 37, 160, 130); });
  add("d256", [&](Case& c) { shape(c.p, 1, 1, 1, 5, 18, 256, 256); });
  add("bshd", [&](Case& c) {
    shape(c.p, 2, 4, 2, 7, 13, 16, 12);
    c.p.layout = Layout::BSHD;
  });
  add("fp16", [&](Case& c) {
    shape(c.p, 2, 4, 2, 7, 45, 32, 32);
    c.p.dtype = DType::f16;
  });
  add("bf16-bshd", [&](Case& c) {
    shape(c.p, 1, 4, 1, 9, 33, 64, 64);
    c.p.dtype = DType::bf16;
    c.p.layout = Layout::BSHD;
  });
  add("fp64-gqa-br", [&](Case& c) {
    shape(c.p, 2, 4, 2, 7, 37, 24, 20);
    c.p.dtype = DType::f64;
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
  });
  add("fp64-d200", [&](Case& c) {
    shape(c.p, 1, 2, 1, 5, 19, 200, 72);
    c.p.dtype = DType::f64;
  });
  add("fp64-finite-huge-fill", [&](Case& c) {
    shape(c.p, 1, 1, 1, 9, 21, 8, 8);
    c.p.dtype = DType::f64;
    c.p.causal = true;
    c.p.fill = MaskFill::finite;
    c.p.fill_value = -1e300;
    c.p.alignment = Alignment::bottom_right;
    c.p.fully_masked = FullyMasked::uniform;
    c.poison = false;
  });
  // Large logits of both signs, all-equal rows, a negative scale.
  add("logits1e4", [&](Case& c) {
    shape(c.p, 1, 2, 1, 6, 35, 8, 8);
    c.amplitude = 30;
    c.p.scale = 11.0;
  });
  add("all-equal", [&](Case& c) {
    shape(c.p, 1, 1, 1, 5, 40, 8, 8);
    c.all_equal = true;
  });
  add("neg-scale", [&](Case& c) {
    shape(c.p, 1, 2, 2, 4, 9, 8, 8);
    c.p.scale = -0.7;
  });
  // Tail tiles: all scores very negative; a tail key wrongly scored 0 would take all the weight.
  add("tail-negative", [&](Case& c) {
    shape(c.p, 1, 1, 1, 3, 33, 4, 4);
    c.negative_scores = true;
    c.p.scale = 1.0;
  });
  // Causal alignments, offsets, fully-masked rows under every policy.
  add("causal-tl", [&](Case& c) {
    shape(c.p, 1, 2, 1, 37, 37, 16, 16);
    c.p.causal = true;
  });
  add("causal-br-gqa", [&](Case& c) {
    shape(c.p, 2, 4, 2, 7, 13, 16, 12);
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
  });
  add("causal-br-lq-gt-lk", [&](Case& c) {
    shape(c.p, 1, 2, 2, 11, 6, 8, 8);
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
  });
  for (FullyMasked fm : {FullyMasked::nan, FullyMasked::zero, FullyMasked::uniform})
    add(std::string("fully-masked-") + to_string(fm), [&](Case& c) {
      shape(c.p, 2, 2, 1, 9, 5, 8, 8);
      c.p.causal = true;
      c.p.alignment = Alignment::bottom_right;
      c.p.fully_masked = fm;
      c.poison = false;
    });  // uniform/nan read every value: no poison
  add("fully-masked-nan-dropout", [&](Case& c) {
    // Lk = 1: half the fully-masked rows have their only key dropped; the reference then gives 0, not NaN.
    shape(c.p, 2, 2, 1, 9, 1, 8, 8);
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
    c.p.fully_masked = FullyMasked::nan;
    c.p.dropout_p = 0.5;
    c.p.dropout_seed = 2;
    c.poison = false;
  });
  add("offsets-per-batch", [&](Case& c) {
    shape(c.p, 3, 2, 1, 6, 40, 8, 8);
    c.p.causal = true;
    c.p.alignment = Alignment::explicit_;
    c.p.causal_offsets = {34, -2, 100};
  });
  add("key-padding-poisoned", [&](Case& c) {
    shape(c.p, 3, 2, 2, 5, 37, 8, 8);
    c.p.key_lengths = {37, 1, 20};
  });
  add("padding-zero-keys", [&](Case& c) {
    shape(c.p, 2, 1, 1, 3, 9, 8, 8);
    c.p.key_lengths = {0, 9};
  });
  add("mask-full", [&](Case& c) {
    shape(c.p, 2, 2, 1, 7, 34, 8, 8);
    c.p.mask_shape = std::array<int64_t, 4>{2, 2, 7, 34};
  });
  add("mask-bcast", [&](Case& c) {
    shape(c.p, 2, 3, 1, 6, 21, 8, 8);
    c.p.mask_shape = std::array<int64_t, 4>{1, 1, 6, 21};
  });
  add("bias-bcast", [&](Case& c) {
    shape(c.p, 2, 2, 1, 5, 19, 8, 8);
    c.p.bias_shape = std::array<int64_t, 4>{1, 2, 5, 19};
  });
  add("bias-bf16-keys", [&](Case& c) {
    shape(c.p, 2, 2, 2, 5, 19, 8, 8);
    c.p.bias_shape = std::array<int64_t, 4>{2, 1, 1, 19};
    c.p.bias_dtype = DType::bf16;
  });
  add("window", [&](Case& c) {
    shape(c.p, 1, 2, 1, 40, 40, 8, 8);
    c.p.window_left = 5;
    c.p.window_right = 2;
  });
  add("window-causal-br", [&](Case& c) {
    shape(c.p, 1, 1, 1, 9, 50, 8, 8);
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
    c.p.window_left = 7;
  });
  add("softcap", [&](Case& c) {
    shape(c.p, 1, 2, 1, 5, 33, 16, 16);
    c.amplitude = 4;
    c.p.softcap = 5.0;
  });
  add("softcap-bias-mask", [&](Case& c) {
    shape(c.p, 1, 2, 1, 5, 33, 16, 16);
    c.amplitude = 3;
    c.p.softcap = 2.0;
    c.p.bias_shape = std::array<int64_t, 4>{1, 1, 5, 33};
    c.p.mask_shape = std::array<int64_t, 4>{1, 2, 5, 33};
  });
  add("finite-fill", [&](Case& c) {
    shape(c.p, 1, 2, 1, 7, 33, 8, 8);
    c.p.causal = true;
    c.p.fill = MaskFill::finite;
    c.p.fill_value = -1e9;
  });
  add("finite-fill-small", [&](Case& c) {
    // A fill close to the scores: masked keys really take part, with their (finite) values.
    shape(c.p, 1, 2, 1, 7, 33, 8, 8);
    c.p.causal = true;
    c.p.fill = MaskFill::finite;
    c.p.fill_value = -1.5;
    c.poison = false;
  });
  add("finite-fill-fully-masked", [&](Case& c) {
    shape(c.p, 1, 1, 1, 9, 5, 8, 8);
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
    c.p.fill = MaskFill::finite;
    c.p.fill_value = -1e4;
    c.p.fully_masked = FullyMasked::uniform;
    c.poison = false;
  });
  add("dropout", [&](Case& c) {
    shape(c.p, 2, 2, 1, 6, 35, 8, 8);
    c.p.dropout_p = 0.3;
    c.p.dropout_seed = 7;
  });
  add("dropout-causal-pad", [&](Case& c) {
    shape(c.p, 2, 2, 2, 6, 35, 8, 8);
    c.p.dropout_p = 0.5;
    c.p.dropout_seed = 3;
    c.p.causal = true;
    c.p.key_lengths = {30, 35};
  });
  add("everything", [&](Case& c) {
    shape(c.p, 2, 4, 2, 9, 41, 12, 10);
    c.p.dtype = DType::bf16;
    c.p.layout = Layout::BSHD;
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
    c.p.key_lengths = {41, 29};
    c.p.window_left = 20;
    c.p.mask_shape = std::array<int64_t, 4>{2, 1, 9, 41};
    c.p.bias_shape = std::array<int64_t, 4>{1, 4, 1, 41};
    c.p.softcap = 8.0;
    c.p.dropout_p = 0.2;
    c.p.dropout_seed = 11;
    c.p.fully_masked = FullyMasked::zero;
  });
  add("everything-fp64", [&](Case& c) {
    shape(c.p, 2, 4, 2, 9, 41, 12, 10);
    c.p.dtype = DType::f64;
    c.p.causal = true;
    c.p.alignment = Alignment::explicit_;
    c.p.causal_offsets = {3, 40};
    c.p.key_lengths = {41, 29};
    c.p.window_right = 4;
    c.p.mask_shape = std::array<int64_t, 4>{1, 4, 9, 41};
    c.p.bias_shape = std::array<int64_t, 4>{2, 4, 9, 41};
    c.p.bias_dtype = DType::f64;
    c.p.softcap = 3.0;
    c.p.dropout_p = 0.25;
    c.p.dropout_seed = 5;
    c.p.fully_masked = FullyMasked::nan;
  });
  return cs;
}

}  // namespace attncheck::testcases
