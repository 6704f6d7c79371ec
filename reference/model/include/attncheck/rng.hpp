// The one deterministic generator of attncheck: SplitMix64 (Steele, Lea, Flood 2014) read as a counter-based
// generator, value n of stream `key` = mix(key + (n+1)·γ). Golden specs, property draws and selftest use it, so a
// seed names the same bits on every machine. Integer arithmetic and IEEE +,*,/ only (no libm in the variates).
#pragma once

#include <cstdint>

namespace attncheck {
inline namespace model {

// The n-th output (n = 0, 1, ...) of the stream keyed by `key`: a pure function of (key, n).
constexpr uint64_t splitmix64_at(uint64_t key, uint64_t n) {
  uint64_t z = key + (n + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit constexpr Rng(uint64_t key) : key_(key) {}
  constexpr uint64_t next() { return splitmix64_at(key_, counter_++); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1), 53 random bits
  double uniform_signed() { return 2.0 * uniform() - 1.0; }                   // [-1, 1)
  // Approximately standard normal: the Irwin-Hall sum of 12 uniforms minus 6 (tails cut at +-6). Chosen over
  // Box-Muller because log and cos differ in the last bit between libms.
  double normal() {
    double s = 0.0;
    for (int i = 0; i < 12; ++i) s += uniform();
    return s - 6.0;
  }
  // Uniform in [lo, hi] (inclusive). The property suite's choosers shrink towards lo.
  int64_t pick(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  // A derived, independent stream (one per tensor), so adding a mask does not change q, k or v.
  constexpr Rng split(uint64_t stream) const {
    return Rng(splitmix64_at((key_ + counter_ * 0x9e3779b97f4a7c15ull) ^ (stream * 0xd1b54a32d192ed03ull), 1));
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

}  // namespace model
}  // namespace attncheck
