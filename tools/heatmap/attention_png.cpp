// The picture `attncheck inspect --png` draws for one case: reference attention weights per (b, h) panel and,
// with a candidate's outputs, where its output error lies relative to the tolerance model, per (i, d).
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "attncheck/heatmap.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {
namespace {

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

// snprintf rather than "b" + std::to_string(b): GCC 12 warns falsely (-Wrestrict) on that concatenation.
std::string head_label(int64_t b, int64_t h) {
  char s[48];
  std::snprintf(s, sizeof s, "b%lld h%lld", static_cast<long long>(b), static_cast<long long>(h));
  return s;
}

// |actual - expected| / tol with the verdict's rules: matching non-finite values are no error; a non-finite
// value on only one side, or any error where the tolerance is 0, is infinitely far outside.
double error_ratio(double e, double a, double tol) {
  if (std::isnan(e) || std::isnan(a)) return std::isnan(e) && std::isnan(a) ? 0.0 : INFINITY;
  if (std::isinf(e) || std::isinf(a)) return e == a ? 0.0 : INFINITY;
  const double err = std::abs(a - e);
  if (err == 0) return 0.0;
  return tol > 0 ? err / tol : INFINITY;
}

}  // namespace

Image attention_heatmap(const Problem& problem, const Inputs& in, const Outputs* actual, const ToleranceModel& model,
                        int max_panels, const HeatmapStyle& style) {
  if (max_panels < 1)
    throw std::invalid_argument("attention_heatmap: max_panels must be >= 1, got " + std::to_string(max_panels));
  Problem p = problem;
  p.want_weights = true;
  const ExpectedAttention r = expected_attention(p, in);
  const int64_t heads = p.B * p.Hq, shown = std::min<int64_t>(heads, max_panels);
  const std::string of = shown < heads ? ", first " + std::to_string(shown) + " of " + std::to_string(heads) : "";

  Section w;
  w.title = "attention weights (reference), " + std::to_string(p.Lq) + "x" + std::to_string(p.Lk) + " per b,h" + of;
  w.map = ColorMap::viridis;
  bool any_nan = false;
  double vmax = 0;
  for (int64_t n = 0; n < shown; ++n) {
    Panel panel{head_label(n / p.Hq, n % p.Hq), p.Lq, p.Lk, {}};
    panel.values.assign(r.weights.begin() + n * p.Lq * p.Lk, r.weights.begin() + (n + 1) * p.Lq * p.Lk);
    for (double x : panel.values) {
      any_nan |= std::isnan(x);
      if (std::isfinite(x)) vmax = std::max(vmax, x);
    }
    w.panels.push_back(std::move(panel));
  }
  // Scale to the largest weight shown, so long rows (weights near 1/Lk) are not all one colour.
  w.vmin = 0;
  w.vmax = vmax > 0 ? vmax : 1;
  w.legend_lo = "0";
  w.legend_hi = fmt("%.3g", w.vmax);
  if (any_nan) w.title += " (grey: nan)";
  std::vector<Section> sections{std::move(w)};

  if (actual) {
    const std::vector<int64_t> want{p.B, p.Hq, p.Lq, p.Dv};
    if (actual->out.shape != want)
      throw std::invalid_argument("attention_heatmap: actual out has shape rank " +
                                  std::to_string(actual->out.shape.size()) + ", expected [" + std::to_string(p.B) +
                                  "," + std::to_string(p.Hq) + "," + std::to_string(p.Lq) + "," + std::to_string(p.Dv) +
                                  "]");
    const std::vector<double> tol = out_tolerance(p, r, model);
    Section e;
    e.map = ColorMap::error_ratio;
    int64_t n_bad = 0;
    for (int64_t n = 0; n < shown; ++n) {
      const int64_t b = n / p.Hq, h = n % p.Hq;
      Panel panel{head_label(b, h), p.Lq, p.Dv, {}};
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d) {
          const size_t k = static_cast<size_t>(((b * p.Hq + h) * p.Lq + i) * p.Dv + d);
          const double ratio = error_ratio(r.out[k], actual->out.at(b, h, i, d), tol[k]);
          n_bad += !(ratio <= 1.0);
          panel.values.push_back(ratio);
        }
      e.panels.push_back(std::move(panel));
    }
    e.title = "|out error| / tolerance, " + std::to_string(p.Lq) + "x" + std::to_string(p.Dv) + " (i,d) per b,h" + of +
              ": " + std::to_string(n_bad) + " outside";
    e.legend_lo = "0";
    e.legend_hi = "1 = tol, red: > tol";
    sections.push_back(std::move(e));
  }
  return render_heatmaps(sections, style);
}

}  // namespace attncheck
