// Rotary position embedding (RoPE), the position stage of the problem: q and k rotated pairwise by angles
// position * inv_freq before the scores. Its parameters, rules and capability are the `rope` entry of the
// modification library (mods_library.cpp); the math lives here, in fp64, for the reference, the CPU kernels and the
// tolerance model. Formulas and which library uses which convention: docs/problem-model.md "Rotary position embedding".
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck {

inline bool uses_rope(const Problem& p) { return p.rotary_dim > 0; }

// The position of the token at key-axis index `axis` of batch b: a query row i sits at i + diagonal_offset(b) (the
// causal diagonal, so bottom-right alignment and explicit offsets place queries after a cache), key j at j; both
// plus rope_offsets[b].
int64_t rope_position(const Problem& p, int64_t b, int64_t axis);
// Largest position accepted: fp32 holds every integer up to 2^24, so kernels that keep positions in fp32 are exact.
inline constexpr int64_t kRopeMaxPosition = int64_t{1} << 24;

// inv_freq of every pair f in [0, rotary_dim / 2), after the frequency scaling (linear, llama3, YaRN), in fp64.
std::vector<double> rope_inv_freq(const Problem& p);
// The factor cos and sin are multiplied with: YaRN's 0.1 ln(factor) + 1, else 1.
double rope_attention_factor(const Problem& p);
// The head dims of pair f: GPT-NeoX (f, f + rotary_dim/2), GPT-J interleaved (2f, 2f + 1).
inline std::pair<int64_t, int64_t> rope_pair(const Problem& p, int64_t f) {
  return p.rotary_interleaved ? std::pair{2 * f, 2 * f + 1} : std::pair{f, f + p.rotary_dim / 2};
}

// x (Dqk values) rotated in place at `position`: for each pair (a, b), angle t = position * inv_freq_f,
// x_a' = m (x_a cos t - x_b sin t), x_b' = m (x_b cos t + x_a sin t); dims >= rotary_dim unchanged.
void rope_rotate(const Problem& p, const std::vector<double>& inv_freq, int64_t position, double* x);

// The stage over one problem: inv_freq computed once, rows rotated at their positions (reference, CPU kernels).
class RopeStage {
 public:
  explicit RopeStage(const Problem& p);
  bool on() const { return on_; }
  // Query row i of batch b, key j of batch b (x: Dqk values).
  void query(int64_t b, int64_t i, double* x) const { rope_rotate(p_, inv_freq_, rope_position(p_, b, i + p_.diagonal_offset(b)), x); }
  void key(int64_t b, int64_t j, double* x) const { rope_rotate(p_, inv_freq_, rope_position(p_, b, j), x); }
  const std::vector<double>& inv_freq() const { return inv_freq_; }

 private:
  const Problem& p_;
  bool on_;
  std::vector<double> inv_freq_;
};

}  // namespace attncheck
