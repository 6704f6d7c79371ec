// The row quantities the tolerance model is built from (docs/tolerance.md), computed in double from one row of the
// looped reference: root sums of squares of the weights and of the P·V terms, deviations from the output, the
// logit spread, the number of keys in the sum and the largest group of exactly tied scores.
#include <algorithm>
#include <cmath>
#include <utility>

#include "rss.hpp"

#include "attncheck/reference.hpp"

namespace attncheck {

void KeyScales::set(size_t j, double scale, double dot, double qk2, double dqk, double score) {
  a[j] = std::abs(scale) * std::sqrt(dqk * (dot * dot / 3.0 + qk2 / 6.0));
  b[j] = std::abs(scale) * std::sqrt(qk2);
  c[j] = std::abs(score);
}

// Copies of one key (all_equal, tied_max, one-hot keys; a bias may still tell their scores apart) have their dot
// products computed identically, so their rounding errors are equal, not independent: a group of keys with equal
// dot-product magnitudes (a_j, b_j) is one term of the root sums of squares, with the group's summed magnitude
// (docs/tolerance.md, "Score errors"). Only groups of two or more keys are listed: group g is keys[start[g]] ..
// keys[start[g + 1] - 1]; in_group[j] marks their keys, every other key is a group of its own.
namespace {
struct TieGroups {
  std::vector<uint32_t> keys;
  std::vector<size_t> start;
  std::vector<char> in_group;
  size_t size() const { return start.size() - 1; }
};

struct TieKey {
  double a, b;
  uint32_t j;
  bool operator<(const TieKey& o) const { return a < o.a || (a == o.a && (b < o.b || (b == o.b && j < o.j))); }
};

void tie_groups(const RowInputs& x, std::vector<TieKey>& keys, TieGroups& t) {
  keys.clear();
  for (size_t j = 0; j < x.s.size(); ++j)
    if (x.takes_part[j] && std::isfinite(x.s[j])) keys.push_back({x.mag.a[j], x.mag.b[j], uint32_t(j)});
  std::sort(keys.begin(), keys.end());
  t.keys.clear();
  t.start.assign(1, 0);
  t.in_group.assign(x.s.size(), 0);
  for (size_t a = 0, b = 0; a < keys.size(); a = b) {
    for (b = a + 1; b < keys.size() && keys[b].a == keys[a].a && keys[b].b == keys[a].b;) ++b;
    if (b - a < 2) continue;
    for (size_t c = a; c < b; ++c) t.keys.push_back(keys[c].j), t.in_group[keys[c].j] = 1;
    t.start.push_back(t.keys.size());
  }
}

// A row's working buffers, kept per thread from row to row: allocated anew, their ~80 allocations per row were
// most of the cost of the error scales (and, under ASan, of the fuzzer's fixture reads). Every buffer is reset to
// its row's size and values before use, so no row sees another's data.
struct RowScratch {
  std::vector<TieKey> tie_keys;
  TieGroups groups;
  std::vector<std::pair<double, uint32_t>> by_score;
  std::vector<int32_t> sgroup;
  std::vector<double> kmean, bdev, cov, qdev, sub, sub8, t, dv, s0, sa, sb, sc, gp, a;
  ColumnRss rss, dev1, dev1_a, dev1_b, dev1_c, devm, devm_a, devm_b, devm_c, gm, gm_a, gm_b, gm_c, rss_p, rss_v,
      per_key, per_key_a, per_key_b, per_key_c;
};

RowScratch& row_scratch() {
  thread_local RowScratch s;
  return s;
}
}  // namespace

void row_error_scales(const RowInputs& x, size_t row, ReferenceResult& r) {
  const size_t Lk = x.s.size(), Dv = static_cast<size_t>(x.Dv);
  RowScratch& S = row_scratch();
  tie_groups(x, S.tie_keys, S.groups);
  const TieGroups& groups = S.groups;
  const auto part = [&](size_t j) { return x.takes_part[j] && std::isfinite(x.s[j]); };
  Rss w2, wa, wb, wc;
  double mean = 0, small = 0, n = 0;
  size_t tied = 0;
  // A key that a running fp32 sum may absorb (w_j < 2u) loses at most itself, and at most the one rounding of an
  // addition to a sum no larger than the row's: min(w_j, u) (docs/tolerance.md, "Softmax denominator").
  const auto one_key = [&](size_t j) {
    if (x.w[j] != 0) mean += x.w[j] * x.s[j];
    if (x.w[j] < 0x1.0p-23) small += std::min(x.w[j], 0x1.0p-24);
  };
  for (size_t j = 0; j < Lk; ++j) {
    if (!part(j) || groups.in_group[j]) continue;
    one_key(j);
    w2.add(x.w[j]);
    wa.add(x.w[j] * x.mag.a[j]);
    wb.add(x.w[j] * x.mag.b[j]);
    wc.add(x.w[j] * x.mag.c[j]);
    n += 1;
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    double sw = 0, sa = 0, sb = 0, sc = 0;
    for (size_t m = groups.start[g]; m < groups.start[g + 1]; ++m) {
      const size_t j = groups.keys[m];
      sw += x.w[j];
      sa += x.w[j] * x.mag.a[j];
      sb += x.w[j] * x.mag.b[j];
      sc += x.w[j] * x.mag.c[j];
      one_key(j);
    }
    w2.add(sw);
    wa.add(sa);
    wb.add(sb);
    wc.add(sc);
    n += static_cast<double>(groups.start[g + 1] - groups.start[g]);
  }
  // Exactly tied scores: repeated terms of the softmax sum, and equal P (sgroup[j]: -1 alone, else its group).
  std::vector<std::pair<double, uint32_t>>& by_score = S.by_score;
  by_score.clear();
  for (size_t j = 0; j < Lk; ++j)
    if (part(j)) by_score.emplace_back(x.s[j], uint32_t(j));
  std::sort(by_score.begin(), by_score.end());
  std::vector<int32_t>& sgroup = S.sgroup;
  sgroup.assign(Lk, -1);
  int32_t sgroups = 0;
  for (size_t a = 0, b = 0; a < by_score.size(); a = b) {
    for (b = a; b < by_score.size() && by_score[b].first == by_score[a].first;) ++b;
    tied = std::max(tied, b - a);
    if (b - a > 1) {
      for (size_t c = a; c < b; ++c) sgroup[by_score[c].second] = sgroups;
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
  std::vector<double>&kmean = S.kmean, &bdev = S.bdev;
  kmean.assign(Dqk, 0.0), bdev.assign(x.q ? Lk : 0, 0.0);
  if (x.q) {
    for (size_t j = 0; j < Lk; ++j)
      if (x.takes_part[j] && x.w[j] != 0)
        for (size_t e = 0; e < Dqk; ++e) kmean[e] += x.w[j] * x.k[j * Dqk + e];
    Rss qbar;
    for (size_t e = 0; e < Dqk; ++e) qbar.add(x.q[e] * kmean[e]);
    r.p_qbar[row] = std::abs(x.scale) * qbar.value();
    for (size_t j = 0; j < Lk; ++j) {
      if (!x.takes_part[j] || x.w[j] == 0) continue;
      Rss bj;
      for (size_t e = 0; e < Dqk; ++e) bj.add(x.q[e] * (x.k[j * Dqk + e] - kmean[e]));
      bdev[j] = std::abs(x.scale) * bj.value();
    }
  }

  // Per output element: the P·V terms t_j = w'_j v_jd and their deviations dv_j = w'_j v_jd - w_j o_d (the change
  // of o_d when weight j alone moves by a relative error, the denominator included). A tie group's common error
  // moves o_d by its summed deviation; the deviations are combined per key and per group, and the larger is kept
  // (keys tied by chance err independently, copies of one key alike). Singletons are their own group: `dev1` holds
  // them, `devm` the keys of larger groups one by one, `gm` those groups' sums; per key = dev1 + devm, per group =
  // dev1 + gm. Repeated P (tied scores) and repeated values (equal v_jd) sum their |t_j| before squaring (_p, _v).
  const double* o = &r.out[row * Dv];
  ColumnRss &rss = S.rss, &dev1 = S.dev1, &dev1_a = S.dev1_a, &dev1_b = S.dev1_b, &dev1_c = S.dev1_c, &devm = S.devm,
            &devm_a = S.devm_a, &devm_b = S.devm_b, &devm_c = S.devm_c, &gm = S.gm, &gm_a = S.gm_a, &gm_b = S.gm_b,
            &gm_c = S.gm_c, &rss_p = S.rss_p, &rss_v = S.rss_v;
  for (ColumnRss* c : {&rss, &dev1, &dev1_a, &dev1_b, &dev1_c, &devm, &devm_a, &devm_b, &devm_c, &gm, &gm_a, &gm_b,
                       &gm_c, &rss_p, &rss_v})
    c->reset(Dv);
  std::vector<double>&cov = S.cov, &qdev = S.qdev, &sub = S.sub, &sub8 = S.sub8, &t = S.t, &dv = S.dv, &s0 = S.s0,
                      &sa = S.sa, &sb = S.sb, &sc = S.sc, &gp = S.gp;
  for (std::vector<double>* e : {&cov, &qdev, &sub, &sub8, &t, &dv, &s0, &sa, &sb, &sc}) e->assign(Dv, 0.0);
  gp.assign(static_cast<size_t>(sgroups) * Dv, 0.0);
  // The unnormalised P_j = exp(s_j - m) = w_j / w_max (w_max = 1/l when a key holds the max).
  double w_max = 0;
  for (size_t j = 0; j < Lk; ++j)
    if (x.takes_part[j]) w_max = std::max(w_max, x.w[j]);
  const char* grouped_v = x.vgroups ? x.vgroups->grouped.data() : nullptr;
  // Key j's terms into t and dv, and every sum but the deviations'.
  const auto key_terms = [&](size_t j) {
    const double wk = x.w[j] * x.keep[j], c = std::abs(x.s[j] - mean), bd = x.q ? bdev[j] : 0.0;
    const double* vj = &x.v[j * Dv];
    for (size_t d = 0; d < Dv; ++d) {
      t[d] = wk * vj[d];
      dv[d] = t[d] - x.w[j] * o[d];
      cov[d] += c * std::abs(dv[d]);
      qdev[d] += std::abs(dv[d]) * bd;
    }
    rss.add(t.data());
    if (x.w[j] < 0x1.0p-14 * w_max)
      for (size_t d = 0; d < Dv; ++d) sub[d] += w_max * std::abs(x.keep[j] * vj[d]);
    if (x.w[j] < 0x1.0p-6 * w_max)  // e4m3's smallest normal
      for (size_t d = 0; d < Dv; ++d) sub8[d] += w_max * std::abs(x.keep[j] * vj[d]);
    if (sgroup[j] < 0) rss_p.add(t.data());
    else
      for (size_t d = 0; d < Dv; ++d) gp[size_t(sgroup[j]) * Dv + d] += std::abs(t[d]);
    const char* gv = grouped_v ? grouped_v + j * Dv : nullptr;
    bool any = false;
    for (size_t d = 0; gv && d < Dv; ++d) any |= gv[d] != 0;
    if (!any) rss_v.add(t.data());
    else
      for (size_t d = 0; d < Dv; ++d)
        if (!gv[d]) rss_v.add_one(d, t[d]);
  };
  for (size_t j = 0; j < Lk; ++j) {
    if (!part(j) || groups.in_group[j] || x.w[j] == 0) continue;
    key_terms(j);
    dev1.add(dv.data());
    dev1_a.add(dv.data(), x.mag.a[j]);
    dev1_b.add(dv.data(), x.mag.b[j]);
    dev1_c.add(dv.data(), x.mag.c[j]);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    std::fill(s0.begin(), s0.end(), 0.0);
    std::fill(sa.begin(), sa.end(), 0.0);
    std::fill(sb.begin(), sb.end(), 0.0);
    std::fill(sc.begin(), sc.end(), 0.0);
    for (size_t m = groups.start[g]; m < groups.start[g + 1]; ++m) {
      const size_t j = groups.keys[m];
      if (x.w[j] == 0) continue;
      key_terms(j);
      devm.add(dv.data());
      devm_a.add(dv.data(), x.mag.a[j]);
      devm_b.add(dv.data(), x.mag.b[j]);
      devm_c.add(dv.data(), x.mag.c[j]);
      for (size_t d = 0; d < Dv; ++d)
        s0[d] += dv[d], sa[d] += x.mag.a[j] * dv[d], sb[d] += x.mag.b[j] * dv[d], sc[d] += x.mag.c[j] * dv[d];
    }
    gm.add(s0.data());
    gm_a.add(sa.data());
    gm_b.add(sb.data());
    gm_c.add(sc.data());
  }
  for (size_t g = 0; g < size_t(sgroups); ++g) rss_p.add(&gp[g * Dv]);
  // Each value group's summed |t_j| = |v| sum_j |w'_j| once, column by column.
  if (x.vgroups) {
    const ValueGroups& vg = *x.vgroups;
    std::vector<double>& a = S.a;
    a.assign(Lk, 0.0);
    for (size_t j = 0; j < Lk; ++j)
      if (x.takes_part[j] && x.w[j] != 0) a[j] = std::abs(x.w[j] * x.keep[j]);
    for (size_t d = 0; d < Dv; ++d)
      for (size_t g = vg.columns[d]; g < vg.columns[d + 1]; ++g) {
        double sum = 0;
        for (size_t m = vg.start[g]; m < vg.start[g + 1]; ++m) sum += a[vg.keys[m]];
        rss_v.add_one(d, vg.value[g] * sum);
      }
  }
  ColumnRss &per_key = S.per_key, &per_key_a = S.per_key_a, &per_key_b = S.per_key_b, &per_key_c = S.per_key_c;
  per_key = dev1, per_key_a = dev1_a, per_key_b = dev1_b, per_key_c = dev1_c;
  per_key.merge(devm), per_key_a.merge(devm_a), per_key_b.merge(devm_b), per_key_c.merge(devm_c);
  dev1.merge(gm), dev1_a.merge(gm_a), dev1_b.merge(gm_b), dev1_c.merge(gm_c);
  for (size_t d = 0; d < Dv; ++d) {
    const size_t e = row * Dv + d;
    r.out_rss_p[e] = rss_p.value(d);
    r.out_rss_v[e] = rss_v.value(d);
    r.out_rss[e] = rss.value(d);
    r.out_dev[e] = std::max(per_key.value(d), dev1.value(d));
    r.out_dev_a[e] = std::max(per_key_a.value(d), dev1_a.value(d));
    r.out_dev_b[e] = std::max(per_key_b.value(d), dev1_b.value(d));
    r.out_dev_c[e] = std::max(per_key_c.value(d), dev1_c.value(d));
    r.out_cov[e] = cov[d];
    r.out_sub[e] += sub[d];
    r.out_sub_e4m3[e] += sub8[d];
    if (x.q) r.out_qdev[e] += qdev[d];
  }
}

ValueGroups value_groups(const double* v, int64_t Lk, int64_t Dv) {
  ValueGroups g;
  g.grouped.assign(static_cast<size_t>(Lk * Dv), 0);
  g.columns.push_back(0);
  g.start.push_back(0);
  std::vector<std::pair<double, uint32_t>> col;
  for (int64_t d = 0; d < Dv; ++d) {
    // NaN (poison in masked slots) and infinities are never grouped.
    col.clear();
    for (int64_t j = 0; j < Lk; ++j)
      if (std::isfinite(v[j * Dv + d])) col.emplace_back(v[j * Dv + d], uint32_t(j));
    std::sort(col.begin(), col.end());
    for (size_t a = 0, b = 0; a < col.size(); a = b) {
      for (b = a + 1; b < col.size() && col[b].first == col[a].first;) ++b;
      if (b - a < 2) continue;
      for (size_t c = a; c < b; ++c) {
        g.keys.push_back(col[c].second);
        g.grouped[size_t(col[c].second) * size_t(Dv) + size_t(d)] = 1;
      }
      g.start.push_back(g.keys.size());
      g.value.push_back(std::abs(col[a].first));
    }
    g.columns.push_back(g.value.size());
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
  r.rope_dev = std::move(x.rope_dev);  // the rotary angle terms of a declared rope contract
  r.rope_p = std::move(x.rope_p);
  r.rope_max = std::move(x.rope_max);
  r.max_logit_a = std::move(x.max_logit_a);  // the max-logit output's error scales
  r.max_logit_b = std::move(x.max_logit_b);
  r.max_logit_c = std::move(x.max_logit_c);
}

}  // namespace attncheck
