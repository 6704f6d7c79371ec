// The row quantities tolerance model v2 is built from (docs/tolerance.md), computed in double from one row of the
// looped reference: root sums of squares of the weights and of the P·V terms, deviations from the output, the
// logit spread, the number of keys in the sum and the largest group of exactly tied scores.
#include <algorithm>
#include <cmath>
#include <tuple>

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

// Copies of one key (all_equal, tied_max, one-hot keys; a bias may still tell their scores apart) have their dot
// products computed identically, so their rounding errors are equal, not independent: a group of keys with equal
// dot-product magnitudes (a_j, b_j) is one term of the root sums of squares, with the group's summed magnitude
// (docs/tolerance.md, "Score errors"). Group g is keys[start[g]] .. keys[start[g + 1] - 1].
namespace {
struct TieGroups {
  std::vector<size_t> keys, start;
  size_t size() const { return start.size() - 1; }
  const size_t* begin(size_t g) const { return keys.data() + start[g]; }
  const size_t* end(size_t g) const { return keys.data() + start[g + 1]; }
};

TieGroups tie_groups(const RowInputs& x) {
  TieGroups t;
  for (size_t j = 0; j < x.s.size(); ++j)
    if (x.takes_part[j] && std::isfinite(x.s[j])) t.keys.push_back(j);
  auto key = [&](size_t j) { return std::make_tuple(x.mag.a[j], x.mag.b[j], j); };
  std::sort(t.keys.begin(), t.keys.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  auto same = [&](size_t a, size_t b) { return x.mag.a[a] == x.mag.a[b] && x.mag.b[a] == x.mag.b[b]; };
  for (size_t a = 0; a < t.keys.size(); ++a)
    if (a == 0 || !same(t.keys[a], t.keys[a - 1])) t.start.push_back(a);
  t.start.push_back(t.keys.size());
  return t;
}
}  // namespace

void row_error_scales(const RowInputs& x, size_t row, ReferenceResult& r) {
  const size_t Lk = x.s.size(), Dv = static_cast<size_t>(x.Dv);
  const TieGroups groups = tie_groups(x);
  Rss w2, wa, wb, wc;
  double mean = 0, small = 0, n = 0;
  size_t tied = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    double sw = 0, sa = 0, sb = 0, sc = 0;
    for (const size_t* it = groups.begin(g); it != groups.end(g); ++it) {
      const size_t j = *it;
      sw += x.w[j];
      sa += x.w[j] * x.mag.a[j];
      sb += x.w[j] * x.mag.b[j];
      sc += x.w[j] * x.mag.c[j];
      if (x.w[j] != 0) mean += x.w[j] * x.s[j];
      // A key that a running fp32 sum may absorb (w_j < 2u) loses at most itself, and at most the one rounding of
      // an addition to a sum no larger than the row's: min(w_j, u) (docs/tolerance.md, "Softmax denominator").
      if (x.w[j] < 0x1.0p-23) small += std::min(x.w[j], 0x1.0p-24);
    }
    w2.add(sw);
    wa.add(sa);
    wb.add(sb);
    wc.add(sc);
    n += static_cast<double>(groups.end(g) - groups.begin(g));
  }
  // Exactly tied scores: repeated terms of the softmax sum, and equal P (sgroup[j]: -1 alone, else its group).
  std::vector<size_t> part;
  for (size_t j = 0; j < Lk; ++j)
    if (x.takes_part[j] && std::isfinite(x.s[j])) part.push_back(j);
  std::sort(part.begin(), part.end(), [&](size_t a, size_t b) { return x.s[a] < x.s[b] || (x.s[a] == x.s[b] && a < b); });
  std::vector<int32_t> sgroup(Lk, -1);
  int32_t sgroups = 0;
  for (size_t a = 0, b = 0; a < part.size(); a = b) {
    for (b = a; b < part.size() && x.s[part[b]] == x.s[part[a]];) ++b;
    tied = std::max(tied, b - a);
    if (b - a > 1) {
      for (size_t c = a; c < b; ++c) sgroup[part[c]] = sgroups;
      ++sgroups;
    }
  }
  double spread = 0;
  for (size_t j = 0; j < Lk; ++j)
    if (x.takes_part[j] && x.w[j] != 0) spread += x.w[j] * std::abs(x.s[j] - mean);
  r.p_rss[row] = w2.value();
  r.p_rss_a[row] = wa.value();
  r.p_rss_b[row] = wb.value();
  r.p_rss_c[row] = wc.value();
  r.spread[row] = spread;
  r.n_terms[row] = n;
  r.n_tied[row] = static_cast<double>(tied);
  r.p_small[row] = small;

  // The shared rounding of q (p_qbar, out_qdev): the weighted mean key, then each key's deviation from it.
  const size_t Dqk = static_cast<size_t>(x.Dqk);
  std::vector<double> kmean(Dqk, 0.0), bdev(x.q ? Lk : 0, 0.0);
  if (x.q) {
    for (size_t j = 0; j < Lk; ++j)
      if (x.takes_part[j] && x.w[j] != 0)
        for (size_t e = 0; e < Dqk; ++e) kmean[e] += x.w[j] * x.k[j * Dqk + e];
    Rss qbar;
    for (size_t e = 0; e < Dqk; ++e) qbar.add(x.q[e] * kmean[e]);
    r.p_qbar[row] = std::abs(x.scale) * qbar.value();
    for (size_t j = 0; j < Lk; ++j) {
      if (!x.takes_part[j] || x.w[j] == 0) continue;
      Rss b;
      for (size_t e = 0; e < Dqk; ++e) b.add(x.q[e] * (x.k[j * Dqk + e] - kmean[e]));
      bdev[j] = std::abs(x.scale) * b.value();
    }
  }

  // Per output element: the P·V terms t_j = w'_j v_jd and their deviations w'_j v_jd - w_j o_d (the change of o_d
  // when weight j alone moves by a relative error, the denominator included). A tie group's common error moves
  // o_d by its summed deviation; the deviations are combined per key and per group, and the larger is kept (keys
  // tied by chance err independently, copies of one key alike).
  const double* o = &r.out[row * Dv];
  std::vector<Rss> rss(Dv), dev(Dv), dev_a(Dv), dev_b(Dv), dev_c(Dv), gdev(Dv), gdev_a(Dv), gdev_b(Dv), gdev_c(Dv);
  std::vector<double> cov(Dv, 0.0), s0(Dv), sa(Dv), sb(Dv), sc(Dv);
  for (size_t g = 0; g < groups.size(); ++g) {
    std::fill(s0.begin(), s0.end(), 0.0);
    std::fill(sa.begin(), sa.end(), 0.0);
    std::fill(sb.begin(), sb.end(), 0.0);
    std::fill(sc.begin(), sc.end(), 0.0);
    for (const size_t* it = groups.begin(g); it != groups.end(g); ++it) {
      const size_t j = *it;
      if (x.w[j] == 0) continue;
      for (size_t d = 0; d < Dv; ++d) {
        const double t = x.w[j] * x.keep[j] * x.v[j * Dv + d];
        const double dv = t - x.w[j] * o[d];
        rss[d].add(t);
        dev[d].add(dv);
        dev_a[d].add(x.mag.a[j] * dv);
        dev_b[d].add(x.mag.b[j] * dv);
        dev_c[d].add(x.mag.c[j] * dv);
        s0[d] += dv, sa[d] += x.mag.a[j] * dv, sb[d] += x.mag.b[j] * dv, sc[d] += x.mag.c[j] * dv;
        cov[d] += std::abs(x.s[j] - mean) * std::abs(dv);
        if (x.q) r.out_qdev[row * Dv + d] += std::abs(dv) * bdev[j];
      }
    }
    for (size_t d = 0; d < Dv; ++d) {
      gdev[d].add(s0[d]);
      gdev_a[d].add(sa[d]);
      gdev_b[d].add(sb[d]);
      gdev_c[d].add(sc[d]);
    }
  }
  // Terms of repeated P and of repeated values: singletons enter the root sum of squares alone, groups summed.
  std::vector<Rss> rss_p(Dv), rss_v(Dv);
  std::vector<double> gp(static_cast<size_t>(sgroups) * Dv, 0.0), gv(static_cast<size_t>(x.vgroups), 0.0);
  // The unnormalised P_j = exp(s_j - m) = w_j / w_max (w_max = 1/l when a key holds the max).
  double w_max = 0;
  for (size_t j = 0; j < Lk; ++j)
    if (x.takes_part[j]) w_max = std::max(w_max, x.w[j]);
  for (size_t j = 0; j < Lk; ++j) {
    if (!x.takes_part[j] || x.w[j] == 0) continue;
    for (size_t d = 0; d < Dv; ++d) {
      const double t = std::abs(x.w[j] * x.keep[j] * x.v[j * Dv + d]);
      if (x.w[j] < 0x1.0p-14 * w_max) r.out_sub[row * Dv + d] += w_max * std::abs(x.keep[j] * x.v[j * Dv + d]);
      if (x.w[j] < 0x1.0p-6 * w_max) r.out_sub_e4m3[row * Dv + d] += w_max * std::abs(x.keep[j] * x.v[j * Dv + d]);
      if (sgroup[j] < 0) rss_p[d].add(t);
      else gp[size_t(sgroup[j]) * Dv + d] += t;
      const int32_t vg = x.vgroup ? x.vgroup[j * Dv + d] : -1;
      if (vg < 0) rss_v[d].add(t);
      else gv[size_t(vg)] += t;
    }
  }
  for (size_t g = 0; g < size_t(sgroups); ++g)
    for (size_t d = 0; d < Dv; ++d) rss_p[d].add(gp[g * Dv + d]);
  if (x.vgroup)
    for (size_t j = 0; j < Lk; ++j)  // each group's sum once, at its column
      for (size_t d = 0; d < Dv; ++d) {
        const int32_t vg = x.vgroup[j * Dv + d];
        if (vg >= 0 && gv[size_t(vg)] != 0) {
          rss_v[d].add(gv[size_t(vg)]);
          gv[size_t(vg)] = 0;
        }
      }
  for (size_t d = 0; d < Dv; ++d) {
    r.out_rss_p[row * Dv + d] = rss_p[d].value();
    r.out_rss_v[row * Dv + d] = rss_v[d].value();
    r.out_rss[row * Dv + d] = rss[d].value();
    r.out_dev[row * Dv + d] = std::max(dev[d].value(), gdev[d].value());
    r.out_dev_a[row * Dv + d] = std::max(dev_a[d].value(), gdev_a[d].value());
    r.out_dev_b[row * Dv + d] = std::max(dev_b[d].value(), gdev_b[d].value());
    r.out_dev_c[row * Dv + d] = std::max(dev_c[d].value(), gdev_c[d].value());
    r.out_cov[row * Dv + d] = cov[d];
  }
}

std::vector<int32_t> value_groups(const double* v, int64_t Lk, int64_t Dv, int32_t& count) {
  std::vector<int32_t> g(static_cast<size_t>(Lk * Dv), -1);
  std::vector<int64_t> idx(static_cast<size_t>(Lk));
  count = 0;
  for (int64_t d = 0; d < Dv; ++d) {
    for (int64_t j = 0; j < Lk; ++j) idx[size_t(j)] = j;
    auto at = [&](int64_t j) { return v[j * Dv + d]; };
    // NaN (poison in masked slots) sorts last and is never equal to anything.
    std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return std::isnan(at(b)) ? !std::isnan(at(a)) : at(a) < at(b); });
    for (size_t a = 0, b = 0; a < idx.size(); a = b) {
      for (b = a + 1; b < idx.size() && at(idx[b]) == at(idx[a]);) ++b;
      if (b - a > 1 && std::isfinite(at(idx[a]))) {
        for (size_t c = a; c < b; ++c) g[size_t(idx[c] * Dv + d)] = count;
        ++count;
      }
    }
  }
  return g;
}

void fill_error_scales(const Problem& p, const Inputs& in, ReferenceResult& r) {
  ReferenceResult x = reference_attention(p, in);
  r.out_rss = std::move(x.out_rss);
  r.out_rss_p = std::move(x.out_rss_p);
  r.out_rss_v = std::move(x.out_rss_v);
  r.out_sub = std::move(x.out_sub);
  r.out_sub_e4m3 = std::move(x.out_sub_e4m3);
  r.p_qbar = std::move(x.p_qbar);
  r.out_qdev = std::move(x.out_qdev);
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
