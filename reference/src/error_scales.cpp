// The row quantities tolerance model v2 is built from (docs/tolerance.md), computed in double from one row of the
// looped reference: root sums of squares of the weights and of the P·V terms, deviations from the output, the
// logit spread, the number of keys in the sum and the largest group of exactly tied scores.
#include <algorithm>
#include <cmath>

#include "attncheck/reference.hpp"

namespace attncheck {

namespace {
// sqrt(sum x^2) without underflow or overflow of the squares (weights of 1e-200 are legitimate), as BLAS nrm2.
struct Rss {
  double scale = 0, ssq = 1;
  void add(double x) {
    const double a = std::abs(x);
    if (a == 0 || !std::isfinite(a)) return;
    if (scale < a) {
      ssq = 1 + ssq * (scale / a) * (scale / a);
      scale = a;
    } else {
      ssq += (a / scale) * (a / scale);
    }
  }
  double value() const { return scale * std::sqrt(ssq); }
};
}  // namespace

void KeyScales::set(size_t j, double scale, double dot, double qk2, double dqk, double score) {
  a[j] = std::abs(scale) * std::sqrt(dqk * (dot * dot / 3.0 + qk2 / 6.0));
  b[j] = std::abs(scale) * std::sqrt(qk2);
  c[j] = std::abs(score);
}

void row_error_scales(const RowInputs& x, size_t row, ReferenceResult& r) {
  const size_t Lk = x.s.size(), Dv = static_cast<size_t>(x.Dv);
  Rss w2, wa, wb, wc;
  double mean = 0, small = 0;
  std::vector<double> part;
  for (size_t j = 0; j < Lk; ++j) {
    if (!x.takes_part[j] || !std::isfinite(x.s[j])) continue;  // a -inf bias hides the key like a mask
    w2.add(x.w[j]);
    wa.add(x.w[j] * x.mag.a[j]);
    wb.add(x.w[j] * x.mag.b[j]);
    wc.add(x.w[j] * x.mag.c[j]);
    if (x.w[j] != 0) mean += x.w[j] * x.s[j];
    // A key that a running fp32 sum may absorb (w_j < 2u) loses at most itself, and at most the one rounding of
    // an addition to a sum no larger than the row's: min(w_j, u) (docs/tolerance.md, "Softmax denominator").
    if (x.w[j] < 0x1.0p-23) small += std::min(x.w[j], 0x1.0p-24);
    part.push_back(x.s[j]);
  }
  double spread = 0;
  for (size_t j = 0; j < Lk; ++j)
    if (x.takes_part[j] && x.w[j] != 0) spread += x.w[j] * std::abs(x.s[j] - mean);
  std::sort(part.begin(), part.end());
  size_t tied = part.empty() ? 0 : 1;
  for (size_t a = 0, b = 0; a < part.size(); a = b) {
    for (b = a; b < part.size() && part[b] == part[a];) ++b;
    tied = std::max(tied, b - a);
  }
  r.p_rss[row] = w2.value();
  r.p_rss_a[row] = wa.value();
  r.p_rss_b[row] = wb.value();
  r.p_rss_c[row] = wc.value();
  r.spread[row] = spread;
  r.n_terms[row] = static_cast<double>(part.size());
  r.n_tied[row] = static_cast<double>(tied);
  r.p_small[row] = small;

  // Per output element: the P·V terms t_j = w'_j v_jd and their deviations w'_j v_jd - w_j o_d (the change of o_d
  // when weight j alone moves by a relative error, the denominator included).
  const double* o = &r.out[row * Dv];
  for (size_t d = 0; d < Dv; ++d) {
    Rss rss, dev, dev_a, dev_b, dev_c;
    double cov = 0;
    for (size_t j = 0; j < Lk; ++j) {
      if (!x.takes_part[j] || x.w[j] == 0) continue;
      const double t = x.w[j] * x.keep[j] * x.v[j * Dv + d];
      const double dv = t - x.w[j] * o[d];
      rss.add(t);
      dev.add(dv);
      dev_a.add(x.mag.a[j] * dv);
      dev_b.add(x.mag.b[j] * dv);
      dev_c.add(x.mag.c[j] * dv);
      cov += std::abs(x.s[j] - mean) * std::abs(dv);
    }
    r.out_rss[row * Dv + d] = rss.value();
    r.out_dev[row * Dv + d] = dev.value();
    r.out_dev_a[row * Dv + d] = dev_a.value();
    r.out_dev_b[row * Dv + d] = dev_b.value();
    r.out_dev_c[row * Dv + d] = dev_c.value();
    r.out_cov[row * Dv + d] = cov;
  }
}

void fill_error_scales(const Problem& p, const Inputs& in, ReferenceResult& r) {
  ReferenceResult x = reference_attention(p, in);
  r.out_rss = std::move(x.out_rss);
  r.out_dev = std::move(x.out_dev);
  r.out_dev_a = std::move(x.out_dev_a);
  r.out_dev_b = std::move(x.out_dev_b);
  r.out_dev_c = std::move(x.out_dev_c);
  r.out_cov = std::move(x.out_cov);
  r.p_rss = std::move(x.p_rss);
  r.p_rss_a = std::move(x.p_rss_a);
  r.p_rss_b = std::move(x.p_rss_b);
  r.p_rss_c = std::move(x.p_rss_c);
  r.spread = std::move(x.spread);
  r.n_terms = std::move(x.n_terms);
  r.n_tied = std::move(x.n_tied);
  r.p_small = std::move(x.p_small);
  r.scores_a = std::move(x.scores_a);
  r.scores_b = std::move(x.scores_b);
}

}  // namespace attncheck
