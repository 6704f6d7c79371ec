// The math of the rotary position embedding (rope.hpp) in fp64: positions, scaled frequencies, the rotation.
// The scaling formulas are Hugging Face transformers' (modeling_rope_utils.py: _compute_llama3_parameters,
// _compute_yarn_parameters), evaluated in double where transformers uses float32.
#include "attncheck/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <tuple>
#include <utility>

namespace attncheck {
inline namespace model {

int64_t rope_position(const Problem& p, int64_t b, int64_t axis) {
  return axis + (p.rope_offsets.empty() ? 0 : p.rope_offsets[static_cast<size_t>(b)]);
}

namespace {
int64_t rope_offset(const Problem& p, int64_t entry) {
  return p.rope_offsets.empty() ? 0 : p.rope_offsets[static_cast<size_t>(entry)];
}
// The token at key-axis index `axis` of batch b (the table's index), `local` within its sequence, whose offset is
// rope_offsets[entry].
RopeAt rope_at(const Problem& p, int64_t b, int64_t axis, int64_t local, int64_t entry) {
  RopeAt r;
  const int64_t off = rope_offset(p, entry);
  if (p.rope_mrope_section.empty()) {
    r.pos[0] = local + off;
    return r;
  }
  r.n = static_cast<int64_t>(p.rope_mrope_section.size());
  for (int64_t s = 0; s < r.n; ++s)
    r.pos[size_t(s)] = p.rope_position_ids[static_cast<size_t>((s * p.B + b) * p.Lk + axis)] + off;
  return r;
}
}  // namespace

RopeAt rope_key_at(const Problem& p, int64_t b, int64_t j) {
  if (p.cu_seqlens_k.empty()) return rope_at(p, b, j, j, b);
  const auto& cu = p.cu_seqlens_k;  // the last sequence starting at or before j owns it (empty ones are skipped)
  const int64_t s = std::upper_bound(cu.begin(), cu.end(), j) - cu.begin() - 1;
  return rope_at(p, b, j, j - cu[size_t(s)], s);
}

RopeAt rope_query_at(const Problem& p, int64_t b, int64_t i) {
  const Problem::RowKeys rk = p.row_keys(b, i);
  return rope_at(p, b, rk.diag, rk.diag - rk.begin, p.cu_seqlens_q.empty() ? b : p.sequence_of(i));
}

std::vector<int> rope_pair_sections(const Problem& p) {
  std::vector<int> out(static_cast<size_t>(p.rotary_dim / 2), 0);
  int64_t f = 0;
  for (size_t s = 0; s < p.rope_mrope_section.size(); ++s)
    for (int64_t n = 0; n < p.rope_mrope_section[s] && f < p.rotary_dim / 2; ++n)
      out[size_t(f++)] = static_cast<int>(s);
  return out;
}

std::vector<double> rope_inv_freq(const Problem& p) {
  const int64_t n = p.rotary_dim / 2;
  const double dim = static_cast<double>(p.rotary_dim), base = p.rope_theta;
  std::vector<double> inv(static_cast<size_t>(n));
  for (int64_t f = 0; f < n; ++f) inv[size_t(f)] = 1.0 / std::pow(base, 2.0 * double(f) / dim);
  if (p.rope_linear_factor != 1.0)
    for (double& x : inv) x /= p.rope_linear_factor;
  if (p.rope_llama3_factor != 1.0) {
    const double old_len = static_cast<double>(p.rope_original_max), lo = p.rope_low_freq_factor,
                 hi = p.rope_high_freq_factor, factor = p.rope_llama3_factor;
    const double low_freq_wavelen = old_len / lo, high_freq_wavelen = old_len / hi;
    for (double& x : inv) {
      const double wavelen = 2.0 * std::numbers::pi / x;
      if (wavelen > low_freq_wavelen)
        x /= factor;                            // low frequencies: interpolated
      else if (wavelen >= high_freq_wavelen) {  // medium: a smooth mix of the two
        const double smooth = (old_len / wavelen - lo) / (hi - lo);
        x = (1.0 - smooth) * x / factor + smooth * x;
      }  // high frequencies unchanged
    }
  }
  if (p.rope_yarn_factor != 1.0) {
    const double factor = p.rope_yarn_factor, max_pos = static_cast<double>(p.rope_original_max);
    auto correction_dim = [&](double rotations) {
      return dim * std::log(max_pos / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
    };
    const double low = std::max(std::floor(correction_dim(p.rope_beta_fast)), 0.0);
    double high = std::min(std::ceil(correction_dim(p.rope_beta_slow)), dim - 1.0);
    if (low == high) high += 0.001;
    for (int64_t f = 0; f < n; ++f) {
      const double ramp = std::clamp((double(f) - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
      double& x = inv[size_t(f)];
      x = x / factor * (1.0 - extrapolation) + x * extrapolation;
    }
  }
  return inv;
}

double rope_attention_factor(const Problem& p) {
  return p.rope_yarn_factor > 1.0 ? 0.1 * std::log(p.rope_yarn_factor) + 1.0 : 1.0;
}

void rope_rotate(const Problem& p, const std::vector<double>& inv_freq, int64_t position, double* x) {
  RopeAt at;
  at.pos[0] = position;
  rope_rotate(p, inv_freq, at, x);
}

namespace {
// fn(a, b, t) for every frequency pair (head dims a, b) at its angle t (mRoPE: at its section's position).
template <class Fn>
void for_pairs(const Problem& p, const std::vector<double>& inv_freq, const RopeAt& at, Fn fn) {
  size_t s = 0;  // the section of pair f (mRoPE: contiguous runs of pairs; else one position for all)
  int64_t end = at.n > 1 ? p.rope_mrope_section[0] : p.rotary_dim / 2;
  for (int64_t f = 0; f < p.rotary_dim / 2; ++f) {
    while (f >= end && int64_t(s) + 1 < at.n) end += p.rope_mrope_section[++s];
    const auto [a, b] = rope_pair(p, f);
    fn(a, b, static_cast<double>(at.pos[s]) * inv_freq[size_t(f)]);
  }
}
}  // namespace

void rope_rotate(const Problem& p, const std::vector<double>& inv_freq, const RopeAt& at, double* x) {
  const double m = rope_attention_factor(p);
  for_pairs(p, inv_freq, at,
            [&](int64_t a, int64_t b, double t) { rope_eval::rotate(x[a], x[b], std::cos(t), std::sin(t), m); });
}

void rope_rotate_back(const Problem& p, const std::vector<double>& inv_freq, const RopeAt& at, double* g, bool abs) {
  const double m = rope_attention_factor(p);
  for_pairs(p, inv_freq, at, [&](int64_t a, int64_t b, double t) {
    const double c = std::cos(t), s = std::sin(t);
    if (abs)  // |R|^T |g|: each output a sum of two magnitudes
      std::tie(g[a], g[b]) =
          std::pair{m * (std::abs(c) * g[a] + std::abs(s) * g[b]), m * (std::abs(s) * g[a] + std::abs(c) * g[b])};
    else  // R^T = m R(-t): the rotation by the opposite angle
      rope_eval::rotate(g[a], g[b], c, -s, m);
  });
}

void qk_norm(const Problem& p, bool query, double* x) {
  const std::vector<double>& w = query ? p.q_norm_weight : p.k_norm_weight;
  if (w.empty()) return;
  double ss = 0;
  for (int64_t d = 0; d < p.Dqk; ++d) ss += x[d] * x[d];
  const double r = rope_eval::rms_scale(ss, p.Dqk, p.qk_norm_eps);
  for (int64_t d = 0; d < p.Dqk; ++d) x[d] = x[d] * r * w[size_t(d)];
}

void qk_norm_back(const Problem& p, bool query, const double* x, double* g, bool abs) {
  const std::vector<double>& w = query ? p.q_norm_weight : p.k_norm_weight;
  if (w.empty()) return;
  double ss = 0;
  for (int64_t d = 0; d < p.Dqk; ++d) ss += x[d] * x[d];
  const double r = rope_eval::rms_scale(ss, p.Dqk, p.qk_norm_eps), r3 = r * r * r / static_cast<double>(p.Dqk);
  double wxg = 0;  // sum_d g_d w_d x_d (abs: of the magnitudes)
  for (int64_t d = 0; d < p.Dqk; ++d) wxg += abs ? g[d] * std::abs(w[size_t(d)] * x[d]) : g[d] * w[size_t(d)] * x[d];
  for (int64_t d = 0; d < p.Dqk; ++d)
    g[d] =
        abs ? r * std::abs(w[size_t(d)]) * g[d] + r3 * std::abs(x[d]) * wxg : r * w[size_t(d)] * g[d] - r3 * x[d] * wxg;
}

RopeStage::RopeStage(const Problem& p) : p_(p), on_(uses_position_stage(p)), rope_(uses_rope(p)) {
  if (rope_) inv_freq_ = rope_inv_freq(p), sections_ = rope_pair_sections(p);
}

}  // namespace model
}  // namespace attncheck
