// The comparison itself: status changes per case, then the accuracy drift of the cases that pass in both reports,
// per group, as the geometric mean of per-case error ratios with a Student t interval (docs/regression.md says why
// this statistic and what it detects).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "baseline.hpp"

namespace attncheck::baseline {

namespace {
// Regularized incomplete beta I_x(a, b) by its continued fraction (Lentz), as in Numerical Recipes' betacf.
double beta_cf(double a, double b, double x) {
  const double tiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  d = 1 / (std::abs(d) < tiny ? tiny : d);
  double h = d;
  for (int m = 1; m <= 300; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + aa * d, c = 1 + aa / c;
    d = 1 / (std::abs(d) < tiny ? tiny : d), c = std::abs(c) < tiny ? tiny : c;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + aa * d, c = 1 + aa / c;
    d = 1 / (std::abs(d) < tiny ? tiny : d), c = std::abs(c) < tiny ? tiny : c;
    const double del = d * c;
    h *= del;
    if (std::abs(del - 1) < 1e-14) break;
  }
  return h;
}

double inc_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  return x < (a + 1) / (a + b + 2) ? front * beta_cf(a, b, x) / a : 1 - front * beta_cf(b, a, 1 - x) / b;
}

// P(|T| <= t) for Student's t with df degrees of freedom.
double t_central(double t, int df) { return 1 - inc_beta(df / 2.0, 0.5, df / (df + t * t)); }

using Key = std::tuple<std::string, std::string, std::string, std::string>;  // impl, dtype, feature, tensor

struct Samples {
  std::vector<double> log_ratio, bias_diff, bias_before, bias_now, share_before, share_now;
};
}  // namespace

double t_quantile(double level, int df) {
  if (!(level > 0 && level < 1) || df < 1)
    throw std::invalid_argument("t_quantile: level must be in (0, 1) and df >= 1, got " + std::to_string(level) + ", " +
                                std::to_string(df));
  double lo = 0, hi = 1e6;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (t_central(mid, df) < level ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Interval mean_interval(const std::vector<double>& xs, double level) {
  const size_t n = xs.size();
  if (n == 0) return {};
  double mean = 0;
  for (double x : xs) mean += x;
  mean /= static_cast<double>(n);
  if (n == 1) return {mean, mean, mean};
  double ss = 0;
  for (double x : xs) ss += (x - mean) * (x - mean);
  const double half =
      t_quantile(level, static_cast<int>(n) - 1) * std::sqrt(ss / static_cast<double>(n - 1) / static_cast<double>(n));
  return {mean, mean - half, mean + half};
}

double Thresholds::growth_for(const std::string& dtype) const {
  const auto it = max_growth_by_dtype.find(dtype);
  return it == max_growth_by_dtype.end() ? max_growth : it->second;
}

std::string GroupDrift::name() const { return impl + " " + dtype + " " + feature + " " + tensor; }

int Comparison::regressions() const {
  int n = 0;
  for (const auto& c : changes) n += c.regression();
  for (const auto& g : groups) n += g.growth_regression || g.bias_regression;
  return n;
}

Comparison compare_reports(const Report& before, const Report& now, const Thresholds& t, bool now_fixtures_only) {
  if (t.min_cases < 2)
    throw std::invalid_argument("--min-cases: must be >= 2 (an interval needs two cases), got " +
                                std::to_string(t.min_cases));
  if (!(t.confidence > 0 && t.confidence < 1))
    throw std::invalid_argument("--confidence: must be in (0, 1), got " + std::to_string(t.confidence));
  Comparison c;
  std::set<std::string> impls_now, impls_before, fixtures_now;
  std::map<std::pair<std::string, std::string>, const Row*> now_rows, before_rows;
  for (const Row& r : now.rows)
    impls_now.insert(r.impl), fixtures_now.insert(r.fixture), now_rows[{r.impl, r.fixture}] = &r;
  for (const Row& r : before.rows) {
    impls_before.insert(r.impl);
    if (now_fixtures_only && !fixtures_now.count(r.fixture)) continue;
    before_rows[{r.impl, r.fixture}] = &r;
  }
  for (const auto& i : impls_before)
    if (!impls_now.count(i)) c.notes.push_back(i + ": not in " + now.origin + ", not compared");
  for (const auto& i : impls_now)
    if (!impls_before.count(i)) c.notes.push_back(i + ": not in " + before.origin + " (no baseline yet)");
  if (before.tol_scale != now.tol_scale) {
    std::ostringstream n;
    n << "--tol-scale differs (" << before.tol_scale << " before, " << now.tol_scale
      << " now): shares of the bound are not comparable; errors are";
    c.notes.push_back(n.str());
  }
  if (before.schema_version < 2 || now.schema_version < 2)
    c.notes.push_back("a schema 1 report has no accuracy profile: drift measured on max_abs_err");

  std::map<Key, Samples> groups;
  auto change = [&](const std::string& impl, const std::string& fix, const std::string& b, const std::string& n,
                    const char* kind) {
    c.changes.push_back({impl, fix, b, n, kind});
  };
  for (const auto& [key, b] : before_rows) {
    if (!impls_now.count(key.first)) continue;
    const auto it = now_rows.find(key);
    const Row* n = it == now_rows.end() ? nullptr : it->second;
    if (!n) {
      if (b->judged()) change(key.first, key.second, b->status, "missing", "capability-loss");
      continue;
    }
    if (n->failed()) {
      change(key.first, key.second, b->status, n->status, b->failed() ? "still-failing" : "new-failure");
      continue;
    }
    if (b->judged() && !n->judged()) {
      change(key.first, key.second, b->status, n->status, "capability-loss");
      continue;
    }
    if (!b->judged() && n->judged()) {
      change(key.first, key.second, b->status, n->status, "capability-gain");
      continue;
    }
    if (b->failed() && n->status == "pass") {
      change(key.first, key.second, b->status, n->status, "fixed");
      continue;
    }
    if (b->status != "pass" || n->status != "pass") continue;
    // Both pass: one sample per tensor in every group the case belongs to.
    std::vector<std::string> features = n->features.empty() ? b->features : n->features;
    features.insert(features.begin(), "all");
    for (const TensorStats& tn : n->tensors)
      for (const TensorStats& tb : b->tensors) {
        if (tb.tensor != tn.tensor) continue;
        const bool acc = tb.has_accuracy && tn.has_accuracy;
        const double mb = acc ? tb.rms_rel : tb.max_abs_err, mn = acc ? tn.rms_rel : tn.max_abs_err;
        if (!std::isfinite(mb) || !std::isfinite(mn)) continue;
        // A floor at 1/16 of the delivered dtype's unit roundoff: an exact result that becomes correctly rounded
        // is a bounded ratio, not an infinite one.
        const double floor = acc && tn.unit > 0 ? tn.unit / 16 : 1e-300;
        const double lr = std::log(std::max(mn, floor) / std::max(mb, floor));
        c.largest.push_back({key.first, key.second, tn.tensor, std::exp(lr)});
        for (const auto& f : features) {
          Samples& s = groups[{key.first, n->dtype, f, tn.tensor}];
          s.log_ratio.push_back(lr);
          if (acc) {
            s.bias_diff.push_back(tn.bias_mag_ulp - tb.bias_mag_ulp);
            s.bias_before.push_back(tb.bias_mag_ulp), s.bias_now.push_back(tn.bias_mag_ulp);
            s.share_before.push_back(tb.share), s.share_now.push_back(tn.share);
          }
        }
      }
  }
  std::sort(c.largest.begin(), c.largest.end(),
            [](const CaseRatio& a, const CaseRatio& b) { return a.ratio > b.ratio; });
  if (c.largest.size() > 10) c.largest.resize(10);
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  for (const auto& [key, s] : groups) {
    GroupDrift g;
    std::tie(g.impl, g.dtype, g.feature, g.tensor) = key;
    g.n = static_cast<int>(s.log_ratio.size());
    const Interval l = mean_interval(s.log_ratio, t.confidence);
    g.growth = {std::exp(l.estimate), std::exp(l.lo), std::exp(l.hi)};
    g.bias_shift = mean_interval(s.bias_diff, t.confidence);
    g.bias_before = mean(s.bias_before), g.bias_now = mean(s.bias_now);
    g.share_before = mean(s.share_before), g.share_now = mean(s.share_now);
    g.judged = g.n >= t.min_cases;
    if (g.judged) {
      const double limit = t.growth_for(g.dtype);
      g.growth_regression = g.growth.lo > limit;
      const bool bias_moved = static_cast<int>(s.bias_diff.size()) >= t.min_cases &&
                              (g.bias_shift.lo > t.max_bias_shift || g.bias_shift.hi < -t.max_bias_shift);
      g.bias_regression = bias_moved && std::abs(g.bias_now) > std::abs(g.bias_before);
      g.improvement = !g.growth_regression && !g.bias_regression && (g.growth.hi < 1 / limit || bias_moved);
    }
    c.groups.push_back(g);
  }
  return c;
}

}  // namespace attncheck::baseline
