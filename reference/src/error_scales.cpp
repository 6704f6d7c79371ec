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

void row_error_scales(const RowInputs& x, size_t row, ReferenceResult& r) {
  const size_t Lk = x.s.size(), Dv = static_cast<size_t>(x.Dv);
  Rss w2, ws2;
  double mean = 0;
  std::vector<double> part;
  for (size_t j = 0; j < Lk; ++j) {
    if (!x.takes_part[j] || !std::isfinite(x.s[j])) continue;  // a -inf bias hides the key like a mask
    w2.add(x.w[j]);
    ws2.add(x.w[j] * x.mag[j]);
    if (x.w[j] != 0) mean += x.w[j] * x.s[j];
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
  r.p_rss_s[row] = ws2.value();
  r.spread[row] = spread;
  r.n_terms[row] = static_cast<double>(part.size());
  r.n_tied[row] = static_cast<double>(tied);

  // Per output element: the P·V terms t_j = w'_j v_jd and their deviations w'_j v_jd - w_j o_d (the change of o_d
  // when weight j alone moves by a relative error, the denominator included).
  const double* o = &r.out[row * Dv];
  for (size_t d = 0; d < Dv; ++d) {
    Rss rss, dev, dev_s;
    double cov = 0;
    for (size_t j = 0; j < Lk; ++j) {
      if (!x.takes_part[j] || x.w[j] == 0) continue;
      const double t = x.w[j] * x.keep[j] * x.v[j * Dv + d];
      const double dv = t - x.w[j] * o[d];
      rss.add(t);
      dev.add(dv);
      dev_s.add(x.mag[j] * dv);
      cov += std::abs(x.s[j] - mean) * std::abs(dv);
    }
    r.out_rss[row * Dv + d] = rss.value();
    r.out_dev[row * Dv + d] = dev.value();
    r.out_dev_s[row * Dv + d] = dev_s.value();
    r.out_cov[row * Dv + d] = cov;
  }
}

void fill_error_scales(const Problem& p, const Inputs& in, ReferenceResult& r) {
  ReferenceResult x = reference_attention(p, in);
  r.out_rss = std::move(x.out_rss);
  r.out_dev = std::move(x.out_dev);
  r.out_dev_s = std::move(x.out_dev_s);
  r.out_cov = std::move(x.out_cov);
  r.p_rss = std::move(x.p_rss);
  r.p_rss_s = std::move(x.p_rss_s);
  r.spread = std::move(x.spread);
  r.n_terms = std::move(x.n_terms);
  r.n_tied = std::move(x.n_tied);
}

}  // namespace attncheck
