// Root sums of squares sqrt(sum x^2) in double without underflow or overflow of the squares (weights of 1e-200 are
// legitimate), for the tolerance model's row scales (error_scales.cpp). Non-finite terms are left out. The scale is
// a power of two, so scaling a term is one exact multiplication; ColumnRss keeps one sum per output column and adds a
// whole row of terms in one vectorisable pass when no term exceeds its column's scale (almost always).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace attncheck {
inline namespace tolerance {

// The scale 2^e of a sum: every term added so far is <= 2^e; e stays within [kMinExp, kMaxExp] so that 2^e and 2^-e
// are both representable (a term below 2^kMinExp is scaled up to at least 2^-54: its square does not underflow).
inline constexpr int kRssMinExp = -1020, kRssMaxExp = 1023;

struct Rss {
  int e = kRssMinExp;
  double lim = std::ldexp(1.0, kRssMinExp), inv = std::ldexp(1.0, -kRssMinExp), ssq = 0;
  void add(double x) { add(e, lim, inv, ssq, x); }
  void raise(double a) { raise(e, lim, inv, ssq, a); }
  // The same on a sum held elsewhere (ColumnRss keeps its fields column-wise).
  static void add(int& e, double& lim, double& inv, double& ssq, double x) {
    const double a = std::abs(x);
    if (!(a <= lim)) {
      if (!std::isfinite(a)) return;
      raise(e, lim, inv, ssq, a);
    }
    const double z = a * inv;
    ssq += z * z;
  }
  static void raise(int& e, double& lim, double& inv, double& ssq, double a) {
    int ex;
    std::frexp(a, &ex);  // a < 2^ex
    if (ex > kRssMaxExp) ex = kRssMaxExp;
    if (ex <= e) return;
    ssq = std::ldexp(ssq, 2 * (e - ex));
    e = ex, lim = std::ldexp(1.0, ex), inv = std::ldexp(1.0, -ex);
  }
  // This sum and another one together.
  void merge(const Rss& o) {
    if (o.e > e) raise(o.lim * 0.75);
    ssq += std::ldexp(o.ssq, 2 * (o.e - e));
  }
  double value() const { return std::ldexp(std::sqrt(ssq), e); }
};

// One Rss per column d, stored column-wise so that adding one key's terms vectorises; add(x, m) adds x[d] * m.
class ColumnRss {
 public:
  ColumnRss() = default;
  explicit ColumnRss(size_t n) { reset(n); }
  // n empty sums, reusing this object's storage (scratch space kept from row to row).
  void reset(size_t n) {
    e_.assign(n, kRssMinExp), lim_.assign(n, std::ldexp(1.0, kRssMinExp)), inv_.assign(n, std::ldexp(1.0, -kRssMinExp));
    ssq_.assign(n, 0.0);
  }
  void add(const double* x, double m = 1.0) {
    const size_t n = ssq_.size();
    bool fast = true;
    for (size_t d = 0; d < n; ++d) fast &= std::abs(x[d] * m) <= lim_[d];
    if (!fast) {
      for (size_t d = 0; d < n; ++d) add_one(d, x[d] * m);
      return;
    }
    for (size_t d = 0; d < n; ++d) {
      const double z = std::abs(x[d] * m) * inv_[d];
      ssq_[d] += z * z;
    }
  }
  void add_one(size_t d, double x) { Rss::add(e_[d], lim_[d], inv_[d], ssq_[d], x); }
  void merge(const ColumnRss& o) {
    for (size_t d = 0; d < ssq_.size(); ++d) {
      Rss r = get(d);
      r.merge(o.get(d));
      set(d, r);
    }
  }
  double value(size_t d) const { return get(d).value(); }

 private:
  Rss get(size_t d) const { return Rss{e_[d], lim_[d], inv_[d], ssq_[d]}; }
  void set(size_t d, const Rss& r) { e_[d] = r.e, lim_[d] = r.lim, inv_[d] = r.inv, ssq_[d] = r.ssq; }
  std::vector<int> e_;
  std::vector<double> lim_, inv_, ssq_;
};

}  // namespace tolerance
}  // namespace attncheck
