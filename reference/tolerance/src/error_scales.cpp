// The row quantities the tolerance model is built from (docs/tolerance.md), computed in double from one row of the
// looped reference: root sums of squares of the weights and of the P·V terms, deviations from the output, the
// logit spread, the number of keys in the sum and the largest group of exactly tied scores.
#include <algorithm>
#include <cmath>
#include <utility>

#include "row_error_scales.hpp"
#include "rss.hpp"

namespace attncheck {
inline namespace tolerance {

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

void row_error_scales(const RowInputs& x, size_t row, ErrorScales& r) {
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
  const double* o = x.o;
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
    if (sgroup[j] < 0)
      rss_p.add(t.data());
    else
      for (size_t d = 0; d < Dv; ++d) gp[size_t(sgroup[j]) * Dv + d] += std::abs(t[d]);
    const char* gv = grouped_v ? grouped_v + j * Dv : nullptr;
    bool any = false;
    for (size_t d = 0; gv && d < Dv; ++d) any |= gv[d] != 0;
    if (!any)
      rss_v.add(t.data());
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

namespace {
// The rotary tolerance scales of one row (reference.hpp rope_dev, rope_p, rope_max): r_j = |scale| sum_f
// inv_freq_f |q_f| |k_jf| (|pos_i| + |pos_j|) for each visible key, summed as out, lse and a score see a relative
// angle error (docs/tolerance.md "Rotary angles"). Dropout's kept weights w' enter dv_j = w'_j v_jd - w_j o_d.
void rope_sensitivity(const Problem& p, const RopeStage& rope, int64_t b, int64_t i, const double* qi, const double* kb,
                      const std::vector<double>& w, const std::vector<char>& visible, const double* vb, const double* o,
                      const Inputs& in, int64_t row, ErrorScales& r) {
  const int64_t Lk = p.Lk, Dqk = p.Dqk, Dv = p.Dv, h = (row / p.Lq) % p.Hq;
  const RopeAt at_i = rope_query_at(p, b, i);
  const double scale = std::abs(p.effective_scale());
  double sum_p = 0, mx = 0;
  for (int64_t j = 0; j < Lk; ++j) {
    if (!visible[size_t(j)] || w[size_t(j)] == 0.0) continue;
    const double* kj = kb + j * Dqk;
    const RopeAt at_j = rope_key_at(p, b, j);
    double rj = 0;
    for (int64_t f = 0; f < p.rotary_dim / 2; ++f) {
      const auto [a, c] = rope_pair(p, f);
      const size_t s = static_cast<size_t>(rope.sections()[size_t(f)]);  // mRoPE: the pair's own positions
      rj += rope.inv_freq()[size_t(f)] * std::hypot(qi[a], qi[c]) * std::hypot(kj[a], kj[c]) *
            (std::abs(double(at_i.pos[s])) + std::abs(double(at_j.pos[s])));
    }
    rj *= scale;
    mx = std::max(mx, rj);
    sum_p += w[size_t(j)] * rj;
    const double wk = kept_weight(p, in, b, h, i, j, w[size_t(j)]);
    for (int64_t d = 0; d < Dv; ++d)
      r.rope_dev[static_cast<size_t>(row * Dv + d)] += std::abs(wk * vb[j * Dv + d] - w[size_t(j)] * o[d]) * rj;
  }
  r.rope_p[size_t(row)] = sum_p;
  r.rope_max[size_t(row)] = mx;
}
}  // namespace

void ErrorScalesPass::start(const LoopedProblem& lp) {
  const Problem& p = lp.p;
  const std::vector<double>& v = lp.v;
  ErrorScales& r = e_;
  p_ = &p, in_ = &lp.in, mods_ = &lp.mods, rope_ = &lp.rope;
  const size_t rows = static_cast<size_t>(p.B * p.Hq * p.Lq), elems = rows * static_cast<size_t>(p.Dv);
  if (p.scores_out != ScoresOut::none)
    for (auto* e : {&r.scores_a, &r.scores_b}) e->assign(rows * static_cast<size_t>(p.Lk), 0.0);
  r.score_mag.assign(rows, 0.0);
  if (p.max_logit != MaxLogitOut::none)
    for (auto* e : {&r.max_logit_a, &r.max_logit_b, &r.max_logit_c}) e->assign(rows, 0.0);
  if (lp.rope.on()) {
    r.rope_dev.assign(elems, 0.0);
    r.rope_p.assign(rows, 0.0);
    r.rope_max.assign(rows, 0.0);
  }
  r.out_abs.assign(elems, 0.0);
  for (auto* e : {&r.out_rss, &r.out_rss_p, &r.out_rss_v, &r.out_sub, &r.out_sub_e4m3, &r.out_qdev, &r.out_dev,
                  &r.out_dev_a, &r.out_dev_b, &r.out_dev_c, &r.out_cov})
    e->assign(elems, 0.0);
  for (auto* e :
       {&r.p_rss, &r.p_rss_a, &r.p_rss_b, &r.p_rss_c, &r.spread, &r.n_terms, &r.n_tied, &r.p_small, &r.p_qbar})
    e->assign(rows, 0.0);
  // Equal values in a column of V (constant V, one-hot or integer values) round alike.
  const int64_t Lk = p.Lk, Dv = p.Dv;
  vgroups_.resize(static_cast<size_t>(p.B * p.Hkv));
  parallel_rows(p.B * p.Hkv, lp.threads, [&](int64_t bh) {
    vgroups_[size_t(bh)] = value_groups(&v[static_cast<size_t>(bh * Lk * Dv)], Lk, Dv);
  });
}

void ErrorScalesPass::row(const RowTrace& t) {
  const Problem& p = *p_;
  const Inputs& in = *in_;
  const ModSet& mods = *mods_;
  const RopeStage& rope = *rope_;
  ErrorScales& r = e_;
  const int64_t Lk = p.Lk, Dqk = p.Dqk, Dv = p.Dv, row = t.row, b = t.b, h = t.h, i = t.i;
  const double scale = p.effective_scale();
  const double *qi = t.q, *kb = t.k, *vb = t.v;
  const std::vector<double>& s = t.s;
  const std::vector<char>& visible = t.visible;
  const std::vector<double>& w = t.w;
  // Key j's dot product and the sum of its squared products.
  const auto dot_qk2 = [&](int64_t j, double& dot, double& qk2) {
    dot = 0.0, qk2 = 0.0;
    for (int64_t d = 0; d < Dqk; ++d) {
      dot += qi[d] * kb[j * Dqk + d];
      qk2 += (qi[d] * kb[j * Dqk + d]) * (qi[d] * kb[j * Dqk + d]);
    }
  };
  // The raw-score output's error magnitudes (KeyScales a and b of each score; 0 where the score is the fill).
  const auto record = [&](int64_t j, double dot, double qk2) {
    r.scores_a[static_cast<size_t>(row * Lk + j)] =
        std::abs(scale) * std::sqrt(static_cast<double>(Dqk) * (dot * dot / 3.0 + qk2 / 6.0));
    r.scores_b[static_cast<size_t>(row * Lk + j)] = std::abs(scale) * std::sqrt(qk2);
  };
  const bool masked_stage = p.scores_out == ScoresOut::masked;
  double dot, qk2;
  if (p.scores_out != ScoresOut::none && !masked_stage)
    for (int64_t j = 0; j < Lk; ++j) dot_qk2(j, dot, qk2), record(j, dot, qk2);

  // Per visible key: the score's error magnitudes (KeyScales) and the bound on |score|, max_j |scale| |q| |k_j| +
  // |bias_ij|, both scaled by the modifications' slope.
  KeyScales ks(static_cast<size_t>(Lk));
  double q_norm = 0.0, score_mag = 0.0;
  for (int64_t d = 0; d < Dqk; ++d) q_norm += qi[d] * qi[d];
  q_norm = std::sqrt(q_norm);
  for (int64_t j = 0; j < Lk; ++j) {
    if (!visible[static_cast<size_t>(j)]) {
      if (masked_stage) record(j, 0.0, 0.0);
      continue;
    }
    dot_qk2(j, dot, qk2);
    double score = mods.has_logit() ? mods.logit(ModAt{b, h, i, t.rk.diag, j}, dot * scale) : dot * scale;
    double k_norm = 0.0;
    for (int64_t d = 0; d < Dqk; ++d) k_norm += kb[j * Dqk + d] * kb[j * Dqk + d];
    double mag = std::abs(scale) * q_norm * std::sqrt(k_norm);
    if (in.bias) {
      const double bias = in.bias->get_offset(broadcast_offset(*in.bias, b, h, i, j));
      score += bias;
      mag += std::abs(bias);
    }
    if (mods.has_score()) {  // the score before the modifications, then after them (the row's score)
      const double modified = s[static_cast<size_t>(j)];
      mag = mods.slope(ModAt{b, h, i, t.rk.diag, j}, score) * mag + std::abs(modified - score);
      score = modified;
    }
    if (std::isfinite(score)) score_mag = std::max(score_mag, mag);  // a -inf bias masks, it has no error
    if (std::isfinite(score)) ks.set(static_cast<size_t>(j), scale, dot, qk2, static_cast<double>(Dqk), score);
    if (masked_stage) record(j, dot, qk2);
  }
  r.score_mag[static_cast<size_t>(row)] = score_mag;
  if (p.max_logit !=
      MaxLogitOut::none) {  // the max-logit output's: the largest KeyScales over the row's finite visible scores
    const size_t n = static_cast<size_t>(row);
    for (int64_t j = 0; j < Lk; ++j)
      if (visible[static_cast<size_t>(j)] && std::isfinite(s[static_cast<size_t>(j)])) {
        r.max_logit_a[n] = std::max(r.max_logit_a[n], ks.a[static_cast<size_t>(j)]);
        r.max_logit_b[n] = std::max(r.max_logit_b[n], ks.b[static_cast<size_t>(j)]);
        r.max_logit_c[n] = std::max(r.max_logit_c[n], ks.c[static_cast<size_t>(j)]);
      }
  }

  double* oi_abs = &r.out_abs[static_cast<size_t>(row * Dv)];  // sum_j |w'_j v_jd|
  for (int64_t j = 0; j < Lk; ++j) {
    const double wj = kept_weight(p, in, b, h, i, j, w[static_cast<size_t>(j)]);
    if (wj == 0.0) continue;
    for (int64_t d = 0; d < Dv; ++d) oi_abs[d] += std::abs(wj * vb[j * Dv + d]);
  }
  if (rope.on() && !t.fully_masked) rope_sensitivity(p, rope, b, i, qi, kb, w, visible, vb, t.out, in, row, r);
  if (t.fully_masked && p.fully_masked != FullyMasked::uniform) return;
  const auto in_row = [&](int64_t j) { return j >= t.rk.begin && j < t.rk.end; };
  const double keep_scale = 1.0 / (1.0 - p.dropout_p);
  std::vector<double> keep(static_cast<size_t>(Lk), in.keep ? 0.0 : 1.0);
  if (in.keep)
    for (int64_t j = 0; j < Lk; ++j)
      if (in.keep->get_offset(((b * p.Hq + h) * p.Lq + i) * Lk + j) != 0) keep[static_cast<size_t>(j)] = keep_scale;
  std::vector<char> takes_part(static_cast<size_t>(Lk));
  for (int64_t j = 0; j < Lk; ++j)
    takes_part[static_cast<size_t>(j)] =
        in_row(j) && (t.fully_masked || visible[static_cast<size_t>(j)] || p.fill == MaskFill::finite);
  const std::vector<double> s_row = t.fully_masked ? std::vector<double>(static_cast<size_t>(Lk), 0.0) : s;
  row_error_scales(RowInputs{s_row, takes_part, w, keep, ks, vb, Dv, t.out, &vgroups_[size_t(b * p.Hkv + t.kvh)], qi,
                             kb, Dqk, scale},
                   static_cast<size_t>(row), r);
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

ExpectedAttention expected_attention(const Problem& p, const Inputs& in, int threads) {
  return expected_attention_rows(p, in, {}, threads);
}

ExpectedAttention expected_attention_rows(const Problem& p, const Inputs& in, const std::vector<int64_t>& rows,
                                          int threads) {
  ExpectedAttention e;
  ErrorScalesPass scales(e);
  static_cast<ReferenceResult&>(e) = reference_attention_rows(p, in, rows, threads, &scales);
  return e;
}

void fill_error_scales(const Problem& p, const Inputs& in, ExpectedAttention& r) {
  ExpectedAttention x = expected_attention(p, in);
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

}  // namespace tolerance
}  // namespace attncheck
