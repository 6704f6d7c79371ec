// The hostile case table for the CPU implementations: lengths 1, primes, tile +- 1, Lq != Lk both ways, odd head
// dims, signed values, logits of +-1e4, every mask kind and combination, every dtype and policy, dropout, BSHD,
// NaN-poisoned masked keys and values. Inputs are a pure function of the case's seed, so a failure replays.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck::testing {

struct Case {
  Problem p;
  uint64_t seed = 1;
  double amp = 1.0;           // q and k are uniform in [-amp, amp] (signed); v in [-1, 1]
  double mask_keep = 0.7;     // probability that a boolean mask entry attends
  bool poison = false;        // NaN in K and V of keys no query can see (padding, column masks)
  bool bias_neg_inf = false;  // some bias entries are -inf (visible keys with a -inf score)
  std::string name() const { return p.name() + "/seed" + std::to_string(seed); }
};

// splitmix64: a small seeded generator, uniform doubles in [-1, 1).
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-52 - 1.0; }
};

inline Inputs make_inputs(const Case& c) {
  const Problem& p = c.p;
  Rng rng{c.seed};
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  for (int64_t n = 0; n < in.q.numel(); ++n) in.q.set_offset(n, c.amp * rng.uniform());
  for (int64_t n = 0; n < in.k.numel(); ++n) in.k.set_offset(n, c.amp * rng.uniform());
  for (int64_t n = 0; n < in.v.numel(); ++n) in.v.set_offset(n, rng.uniform());
  if (p.mask_shape) {
    const auto& s = *p.mask_shape;
    Tensor m(DType::u8, {s[0], s[1], s[2], s[3]});
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t h = 0; h < s[1]; ++h)
        for (int64_t i = 0; i < s[2]; ++i)
          for (int64_t j = 0; j < s[3]; ++j) {
            // Rows i % 5 == 3 are fully masked (when the mask has a query dim): the policies must show.
            const bool dead_row = s[2] > 1 && s[3] > 1 && i % 5 == 3;
            m.put(b, h, i, j, !dead_row && (rng.uniform() + 1) / 2 < c.mask_keep);
          }
    in.mask = std::move(m);
  }
  if (p.bias_shape) {
    const auto& s = *p.bias_shape;
    Tensor t(p.bias_dtype, {s[0], s[1], s[2], s[3]});
    for (int64_t n = 0; n < t.numel(); ++n) {
      const bool ninf = c.bias_neg_inf && (rng.next() % 7 == 0);
      t.set_offset(n, ninf ? -std::numeric_limits<double>::infinity() : 2.0 * rng.uniform());
    }
    in.bias = std::move(t);
  }
  if (p.dropout_p > 0) in.keep = make_keep_mask(p);
  if (c.poison) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const bool column_mask = p.mask_shape && (*p.mask_shape)[1] == 1 && (*p.mask_shape)[2] == 1;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t j = 0; j < p.Lk; ++j) {
        bool dead = j >= p.key_length(b);
        if (column_mask) dead = dead || in.mask->at((*p.mask_shape)[0] == 1 ? 0 : b, 0, 0, j) == 0;
        if (!dead) continue;
        for (int64_t h = 0; h < p.Hkv; ++h) {
          for (int64_t d = 0; d < p.Dqk; ++d) in.k.put(b, h, j, d, nan);
          for (int64_t d = 0; d < p.Dv; ++d) in.v.put(b, h, j, d, nan);
        }
      }
  }
  return in;
}

// The table. Tiles of cpu-flash are kFlashBlockQ x kFlashBlockK = 96 x 128, or 48 x 256 for head dims <= 64
// (impls/cpu/cpu_impls.hpp), so lengths 127/129, 255/257 and 513 hit tails on both axes (and every SIMD strip
// width's tails).
inline std::vector<Case> hostile_cases() {
  std::vector<Case> cs;
  auto base = [](DType t, int64_t B, int64_t Hq, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t Dqk, int64_t Dv) {
    Case c;
    c.p.dtype = t;
    c.p.B = B, c.p.Hq = Hq, c.p.Hkv = Hkv, c.p.Lq = Lq, c.p.Lk = Lk, c.p.Dqk = Dqk, c.p.Dv = Dv;
    c.p.want_lse = true;
    c.p.want_weights = true;
    c.seed = 1000 + 17 * static_cast<uint64_t>(Lq) + static_cast<uint64_t>(Lk);
    return c;
  };
  const DType f64 = DType::f64, f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;

  // Shapes: lengths 1, primes, tile +- 1, Lq != Lk both ways, odd and unequal head dims, GQA / MQA.
  cs.push_back(base(f32, 1, 1, 1, 1, 1, 1, 1));
  cs.push_back(base(f32, 1, 2, 2, 1, 257, 64, 64));
  cs.push_back(base(f32, 1, 2, 1, 257, 1, 64, 64));
  cs.push_back(base(f32, 2, 4, 2, 129, 255, 33, 33));
  cs.push_back(base(f64, 1, 3, 1, 127, 513, 64, 48));
  cs.push_back(base(f16, 1, 2, 2, 7, 13, 5, 3));
  cs.push_back(base(bf16, 1, 4, 4, 131, 97, 80, 80));
  cs.push_back(base(f32, 1, 2, 1, 255, 129, 32, 32));
  {
    Case c = base(f64, 1, 1, 1, 513, 255, 16, 16);
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
    cs.push_back(c);
  }
  {
    Case c = base(f32, 1, 2, 2, 257, 257, 128, 128);
    c.p.want_weights = false;  // cpu-flash without its second pass
    cs.push_back(c);
  }
  // Causal in every alignment; windows; per-batch offsets.
  for (DType t : {f64, f32, f16, bf16}) {
    Case c = base(t, 1, 2, 1, 257, 257, 64, 64);
    c.p.causal = true;
    cs.push_back(c);
  }
  for (auto [lq, lk] : {std::pair<int64_t, int64_t>{97, 257}, {257, 97}}) {
    Case c = base(f32, 2, 8, 2, lq, lk, 64, 64);
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;  // Lq > Lk: the first rows see nothing
    cs.push_back(c);
  }
  {
    Case c = base(f32, 3, 2, 2, 129, 300, 32, 32);
    c.p.causal = true;
    c.p.alignment = Alignment::explicit_;
    c.p.causal_offsets = {0, 171, -20};
    c.p.window_left = 40;
    cs.push_back(c);
  }
  {
    Case c = base(bf16, 1, 2, 2, 300, 300, 64, 64);
    c.p.window_left = 7;
    c.p.window_right = 300;  // a right edge beyond the end
    c.p.alignment = Alignment::bottom_right;
    cs.push_back(c);
  }
  {
    Case c = base(f32, 1, 2, 2, 200, 520, 16, 16);
    c.p.window_left = 0;
    c.p.window_right = 3;
    c.p.want_weights = false;
    cs.push_back(c);
  }
  // Key padding (one batch with no key at all), NaN-poisoned padded keys and values.
  for (FullyMasked fm : {FullyMasked::zero, FullyMasked::nan}) {
    Case c = base(f32, 3, 2, 1, 129, 257, 64, 64);
    c.p.key_lengths = {257, 100, 0};
    c.p.fully_masked = fm;
    c.poison = true;
    cs.push_back(c);
  }
  {
    Case c = base(f16, 2, 4, 2, 70, 513, 64, 64);
    c.p.key_lengths = {256, 257};
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
    c.poison = true;
    cs.push_back(c);
  }
  // Boolean masks in every broadcast shape, fully-masked rows, each policy; combined with causal and padding.
  const std::array<int64_t, 4> shapes[] = {{2, 4, 61, 131}, {2, 1, 61, 131}, {1, 1, 1, 131},
                                           {2, 1, 1, 131},  {1, 4, 61, 1},   {1, 1, 61, 131}};
  int k = 0;
  for (const auto& s : shapes)
    for (FullyMasked fm : {FullyMasked::nan, FullyMasked::zero, FullyMasked::uniform}) {
      Case c = base(k % 2 ? f32 : f64, 2, 4, 2, 61, 131, 24, 24);
      c.p.mask_shape = s;
      c.p.fully_masked = fm;
      c.p.causal = k % 3 == 0;
      if (k % 4 == 1) c.p.key_lengths = {131, 40};
      c.seed += static_cast<uint64_t>(k++);
      cs.push_back(c);
    }
  {  // a key-column mask with poisoned masked keys, -inf fill and a finite -1e9 fill
    for (MaskFill f : {MaskFill::neg_inf, MaskFill::finite}) {
      Case c = base(f32, 2, 2, 2, 130, 260, 64, 64);
      c.p.mask_shape = std::array<int64_t, 4>{2, 1, 1, 260};
      c.p.fill = f;
      c.poison = true;
      cs.push_back(c);
    }
  }
  // Additive bias in several shapes and dtypes, -inf entries, combined with a mask.
  for (auto [s, dt] : {std::pair<std::array<int64_t, 4>, DType>{{1, 4, 37, 131}, f32},
                       {{2, 1, 1, 131}, bf16},
                       {{2, 4, 37, 131}, f64},
                       {{1, 1, 37, 1}, f16}}) {
    Case c = base(f32, 2, 4, 4, 37, 131, 16, 16);
    c.p.bias_shape = s;
    c.p.bias_dtype = dt;
    cs.push_back(c);
  }
  {
    Case c = base(f32, 1, 2, 2, 40, 300, 16, 16);
    c.p.bias_shape = std::array<int64_t, 4>{1, 2, 40, 300};
    c.bias_neg_inf = true;
    c.p.mask_shape = std::array<int64_t, 4>{1, 1, 40, 300};
    cs.push_back(c);
  }
  // Logits of +-1e4, with and without softcap; all-equal rows (q = 0); negative and zero scale.
  for (double cap : {0.0, 30.0}) {
    Case c = base(f32, 1, 2, 2, 129, 257, 64, 64);
    c.amp = 40.0;  // |q·k| up to ~1e5, scaled by 1/8
    c.p.softcap = cap;
    c.p.causal = cap > 0;
    cs.push_back(c);
  }
  {
    Case c = base(f64, 1, 2, 2, 33, 300, 64, 64);
    c.amp = 60.0;
    c.p.softcap = 5.0;
    c.p.bias_shape = std::array<int64_t, 4>{1, 1, 33, 300};
    cs.push_back(c);
  }
  for (double sc : {0.0, -0.7}) {
    Case c = base(f32, 1, 1, 1, 50, 270, 8, 8);
    c.p.scale = sc;  // 0: every row uniform
    cs.push_back(c);
  }
  // Finite fill: masked keys take part with exp(fill - max); fully-masked rows follow the policy.
  for (FullyMasked fm : {FullyMasked::nan, FullyMasked::zero, FullyMasked::uniform}) {
    Case c = base(f32, 2, 2, 2, 100, 280, 32, 32);
    c.p.fill = MaskFill::finite;
    c.p.fill_value = fm == FullyMasked::zero ? -1e9 : -3.0;
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
    c.p.key_lengths = {280, 0};
    c.p.fully_masked = fm;
    cs.push_back(c);
  }
  // Dropout through the keep-mask (weights and lse stay pre-dropout), with fully-masked rows under each policy.
  for (FullyMasked fm : {FullyMasked::nan, FullyMasked::zero, FullyMasked::uniform}) {
    Case c = base(fm == FullyMasked::zero ? bf16 : f32, 2, 2, 1, 129, 257, 32, 32);
    c.p.dropout_p = 0.3;
    c.p.dropout_seed = 42;
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
    c.p.key_lengths = {257, 3};
    c.p.mask_shape = std::array<int64_t, 4>{2, 1, 129, 257};
    c.p.fully_masked = fm;
    cs.push_back(c);
  }
  // BSHD layout with GQA and Dqk != Dv in every dtype.
  for (DType t : {f64, f32, f16, bf16}) {
    Case c = base(t, 2, 6, 3, 131, 259, 40, 24);
    c.p.layout = Layout::BSHD;
    c.p.causal = t == f32 || t == bf16;
    c.p.want_weights = t != f16;
    cs.push_back(c);
  }
  // Decode and short queries with the query heads of a KV head packed into one tile (cpu-flash, without weights):
  // 128 heads on one KV head (rows of two tiles, keys split and merged) with per-head sinks, ALiBi slopes, dropout
  // and key padding; 4 heads a KV head over 3 causal queries with a per-head mask; 2 heads (the few-rows layout)
  // with Dv not a whole SIMD strip.
  {
    Case c = base(bf16, 2, 128, 1, 1, 300, 96, 64);
    c.p.want_weights = false;
    c.p.key_lengths = {300, 77};
    for (int64_t h = 0; h < c.p.Hq; ++h) {
      c.p.sinks.push_back(h % 3 == 0 ? -std::numeric_limits<double>::infinity() : 0.125 * static_cast<double>(h % 7));
      c.p.alibi_slopes.push_back(0.015625 * static_cast<double>(h % 5));
    }
    c.p.dropout_p = 0.2;
    c.p.dropout_seed = 7;
    c.poison = true;
    cs.push_back(c);
  }
  {
    Case c = base(f32, 2, 8, 2, 3, 200, 64, 64);
    c.p.want_weights = false;
    c.p.causal = true;
    c.p.alignment = Alignment::bottom_right;
    c.p.mask_shape = std::array<int64_t, 4>{2, 8, 3, 200};
    cs.push_back(c);
  }
  {
    Case c = base(f16, 1, 4, 2, 1, 129, 40, 24);
    c.p.want_weights = false;
    c.p.sinks = {0.5, -std::numeric_limits<double>::infinity(), 2.0, -1.0};
    cs.push_back(c);
  }
  // Every dtype x policy x fill on a masked problem with fully-masked rows.
  for (DType t : {f64, f32, f16, bf16})
    for (FullyMasked fm : {FullyMasked::nan, FullyMasked::zero, FullyMasked::uniform})
      for (MaskFill f : {MaskFill::neg_inf, MaskFill::finite}) {
        Case c = base(t, 1, 2, 2, 23, 270, 16, 16);
        c.p.mask_shape = std::array<int64_t, 4>{1, 2, 23, 270};
        c.p.fully_masked = fm;
        c.p.fill = f;
        cs.push_back(c);
      }
  return cs;
}

}  // namespace attncheck::testing
