// The generator of CaseSpecs over the whole problem space, written once against a chooser so that RapidCheck
// (which shrinks every pick towards its lower bound) and the seeded selftest draw from the same distribution.
// Every first alternative is the simplest, so shrinking walks towards small, feature-free cases.
#pragma once

#include "case.hpp"

namespace attncheck::prop {

// Lengths that break tiled kernels: 1, primes, and tile - 1, tile, tile + 1 for tiles 16, 32, 64, 128.
inline constexpr int64_t kHostileLengths[] = {1,  2,  3,  5,  7,   13,  15,  16,  17,  31,  32, 33,
                                              63, 64, 65, 97, 127, 128, 129, 191, 255, 257, 300};
inline constexpr int64_t kHeadDims[] = {8, 16, 1, 2, 3, 4, 5, 7, 24, 32, 40, 64, 80, 96, 128};

template <class C>
int64_t draw_length(C& c) {
  if (c.pick(0, 9) < 6) return kHostileLengths[c.pick(0, std::size(kHostileLengths) - 1)];
  return c.pick(1, 300);
}

template <class C>
bool chance(C& c, int percent) {  // false is the shrink target
  return c.pick(0, 99) >= 100 - percent;
}

template <class C>
CaseSpec draw_spec(C& c) {
  CaseSpec s;
  s.B = c.pick(1, 3);
  if (chance(c, 20)) {  // MQA: one KV head for all query heads
    s.Hkv = 1;
    s.Hq = c.pick(1, 6);
  } else {
    s.Hkv = c.pick(1, 3);
    static constexpr int64_t ratios[] = {1, 2, 4};
    s.Hq = s.Hkv * ratios[c.pick(0, 2)];
  }
  s.Lq = draw_length(c);
  s.Lk = chance(c, 25) ? s.Lq : draw_length(c);
  s.Dqk = kHeadDims[c.pick(0, std::size(kHeadDims) - 1)];
  s.Dv = chance(c, 40) ? kHeadDims[c.pick(0, std::size(kHeadDims) - 1)] : s.Dqk;
  static constexpr DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
  s.dtype = dtypes[c.pick(0, 3)];
  s.layout = chance(c, 30) ? Layout::BSHD : Layout::BHSD;
  s.causal = chance(c, 45);
  if (s.causal || chance(c, 15)) {  // alignment also places the window
    static constexpr Alignment al[] = {Alignment::top_left, Alignment::bottom_right, Alignment::explicit_};
    s.alignment = al[c.pick(0, 2)];
    s.causal_offset = c.pick(-s.Lq, s.Lk);
    s.per_batch_offsets = s.alignment == Alignment::explicit_ && chance(c, 30);
  }
  s.key_padding = chance(c, 25);
  s.mask_kind = chance(c, 35) ? static_cast<int>(c.pick(1, 3)) : 0;
  static constexpr int densities[] = {70, 95, 30, 5};
  s.mask_density = densities[c.pick(0, 3)];
  s.bias_kind = chance(c, 35) ? static_cast<int>(c.pick(1, 3)) : 0;
  if (chance(c, 15)) {
    s.window_left = c.pick(0, 40);
    s.window_right = chance(c, 50) ? c.pick(0, 40) : -1;
  }
  for (const ModEntry& m : logit_modifications())
    if (chance(c, 15))
      s.logit.emplace_back(m.name, m.examples[static_cast<size_t>(c.pick(0, std::ssize(m.examples) - 1))]);
  s.finite_fill = chance(c, 15);
  static constexpr FullyMasked fm[] = {FullyMasked::zero, FullyMasked::nan, FullyMasked::uniform};
  s.fully_masked = fm[c.pick(0, 2)];
  s.scale_kind = chance(c, 40) ? static_cast<int>(c.pick(1, 3)) : 0;
  static constexpr double drops[] = {0.1, 0.5};
  if (chance(c, 15)) s.dropout_p = drops[c.pick(0, 1)];
  s.values = static_cast<Values>(c.pick(0, static_cast<int64_t>(Values::count) - 1));
  s.poison = chance(c, 30);
  s.empty_rows = chance(c, 15);
  s.seed = static_cast<uint64_t>(c.pick(1, 1 << 30));
  normalise(s);
  return s;
}

}  // namespace attncheck::prop
