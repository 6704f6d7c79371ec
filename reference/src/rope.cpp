// The math of the rotary position embedding (rope.hpp) in fp64: positions, scaled frequencies, the rotation.
// The scaling formulas are Hugging Face transformers' (modeling_rope_utils.py: _compute_llama3_parameters,
// _compute_yarn_parameters), evaluated in double where transformers uses float32.
#include "attncheck/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace attncheck {

int64_t rope_position(const Problem& p, int64_t b, int64_t axis) {
  return axis + (p.rope_offsets.empty() ? 0 : p.rope_offsets[static_cast<size_t>(b)]);
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
      if (wavelen > low_freq_wavelen) x /= factor;  // low frequencies: interpolated
      else if (wavelen >= high_freq_wavelen) {      // medium: a smooth mix of the two
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
  const double m = rope_attention_factor(p), pos = static_cast<double>(position);
  for (int64_t f = 0; f < p.rotary_dim / 2; ++f) {
    const auto [a, b] = rope_pair(p, f);
    const double t = pos * inv_freq[size_t(f)], c = std::cos(t), s = std::sin(t);
    const double xa = x[a], xb = x[b];
    x[a] = m * (xa * c - xb * s);
    x[b] = m * (xb * c + xa * s);
  }
}

RopeStage::RopeStage(const Problem& p) : p_(p), on_(uses_rope(p)) {
  if (on_) inv_freq_ = rope_inv_freq(p);
}

}  // namespace attncheck
