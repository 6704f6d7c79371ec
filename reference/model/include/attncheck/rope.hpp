// Rotary position embedding (RoPE), the position stage of the problem: q and k rotated pairwise by angles
// position * inv_freq before the scores. Its parameters, rules and capability are the `rope` entry of the
// modification library (mods_library.cpp); the math lives here, in fp64, for the reference, the CPU kernels and the
// tolerance model. Formulas and which library uses which convention: docs/problem-model.md "Rotary position embedding".
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "attncheck/problem.hpp"
#include "attncheck/rope_eval.hpp"

namespace attncheck {
inline namespace model {

inline bool uses_rope(const Problem& p) { return p.rotary_dim > 0; }
inline bool uses_qk_norm(const Problem& p) { return !p.q_norm_weight.empty() || !p.k_norm_weight.empty(); }
// Whether q and k pass through the position stage (QK-norm, then RoPE) before the scores.
inline bool uses_position_stage(const Problem& p) { return uses_rope(p) || uses_qk_norm(p); }

// The position of the token at key-axis index `axis` of batch b: a query row i sits at i + diagonal_offset(b) (the
// causal diagonal, so bottom-right alignment and explicit offsets place queries after a cache), key j at j; both
// plus rope_offsets[b].
int64_t rope_position(const Problem& p, int64_t b, int64_t axis);
// The positions of one token per mRoPE section (n = 1 without mRoPE: one position for every pair).
inline constexpr int64_t kRopeMaxSections = 8;
struct RopeAt {
  std::array<int64_t, kRopeMaxSections> pos{};
  int64_t n = 1;
};
// Query row i of batch b sits at the key-axis index on its causal diagonal (Problem::row_keys().diag); key j at j.
// Its position is that index within its sequence (varlen: minus the sequence's first key) plus rope_offsets of its
// batch (varlen: of its sequence); with mRoPE, per section, rope_position_ids at that index plus the same offset.
RopeAt rope_query_at(const Problem& p, int64_t b, int64_t i);
RopeAt rope_key_at(const Problem& p, int64_t b, int64_t j);
// The mRoPE section of each frequency pair f in [0, rotary_dim / 2) (all 0 without mRoPE): Qwen2-VL's contiguous
// sections, pair f in section s when sum(section[0..s)) <= f < sum(section[0..s]).
std::vector<int> rope_pair_sections(const Problem& p);
// Largest position accepted: fp32 holds every integer up to 2^24, so kernels that keep positions in fp32 are exact.
inline constexpr int64_t kRopeMaxPosition = int64_t{1} << 24;

// inv_freq of every pair f in [0, rotary_dim / 2), after the frequency scaling (linear, llama3, YaRN), in fp64.
std::vector<double> rope_inv_freq(const Problem& p);
// The factor cos and sin are multiplied with: YaRN's 0.1 ln(factor) + 1, else 1.
double rope_attention_factor(const Problem& p);
// The head dims of pair f: GPT-NeoX (f, f + rotary_dim/2), GPT-J interleaved (2f, 2f + 1).
inline std::pair<int64_t, int64_t> rope_pair(const Problem& p, int64_t f) {
  const rope_eval::PairDims d = rope_eval::pair_dims(f, p.rotary_dim, p.rotary_interleaved);
  return {d.a, d.b};
}

// x (Dqk values) rotated in place at `position`: for each pair (a, b), angle t = position * inv_freq_f,
// x_a' = m (x_a cos t - x_b sin t), x_b' = m (x_b cos t + x_a sin t); dims >= rotary_dim unchanged.
void rope_rotate(const Problem& p, const std::vector<double>& inv_freq, int64_t position, double* x);
// The same with mRoPE's per-section positions: pair f rotated at at.pos[section of f].
void rope_rotate(const Problem& p, const std::vector<double>& inv_freq, const RopeAt& at, double* x);
// QK-norm of one head vector (Dqk values) in place, fp64: x_d / sqrt(mean_d(x_d^2) + qk_norm_eps) * w_d with the
// q or k weights; nothing when that weight list is empty.
void qk_norm(const Problem& p, bool query, double* x);
// The backward of the stage (docs/backward.md "Position stage"): g, the gradient of the rotated (or normed) vector,
// becomes that of its input in place. Rotation: g <- R^T g (R orthogonal times the attention factor). QK-norm of
// the input x: g_e <- r w_e g_e - (r^3 / Dqk) x_e sum_d g_d w_d x_d, r = 1 / sqrt(mean(x^2) + eps); the weights get
// no gradient here (the gradients are dq, dk, dv, dbias). abs: the same maps with every factor and term taken by its
// magnitude, g holding error scales (|R|^T g, |J|^T g).
void rope_rotate_back(const Problem& p, const std::vector<double>& inv_freq, const RopeAt& at, double* g, bool abs);
void qk_norm_back(const Problem& p, bool query, const double* x, double* g, bool abs);

// The stage over one problem: QK-norm, then the rotation at each row's positions, inv_freq computed once
// (reference, CPU kernels). on(): the problem uses QK-norm or RoPE.
class RopeStage {
 public:
  explicit RopeStage(const Problem& p);
  bool on() const { return on_; }
  // Query row i of batch b, key j of batch b (x: Dqk values).
  void query(int64_t b, int64_t i, double* x) const {
    qk_norm(p_, true, x);
    if (rope_) rope_rotate(p_, inv_freq_, rope_query_at(p_, b, i), x);
  }
  void key(int64_t b, int64_t j, double* x) const {
    qk_norm(p_, false, x);
    if (rope_) rope_rotate(p_, inv_freq_, rope_key_at(p_, b, j), x);
  }
  // The backward through the stage of query row i / key j: g (the gradient, or with abs its error scale, of the
  // stage's output) becomes that of the stage's input x (the query or key as given, Dqk values).
  void query_back(int64_t b, int64_t i, const double* x, double* g, bool abs) const {
    if (rope_) rope_rotate_back(p_, inv_freq_, rope_query_at(p_, b, i), g, abs);
    qk_norm_back(p_, true, x, g, abs);
  }
  void key_back(int64_t b, int64_t j, const double* x, double* g, bool abs) const {
    if (rope_) rope_rotate_back(p_, inv_freq_, rope_key_at(p_, b, j), g, abs);
    qk_norm_back(p_, false, x, g, abs);
  }
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  const std::vector<int>& sections() const { return sections_; }  // rope_pair_sections

 private:
  const Problem& p_;
  bool on_, rope_;
  std::vector<double> inv_freq_;
  std::vector<int> sections_;
};

}  // namespace model
}  // namespace attncheck
