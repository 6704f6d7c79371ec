// Error anatomy (anatomy.hpp): counts and locations of failing elements, then correlations, all from the Subject.
#include "anatomy.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

namespace attncheck::diagnose {

namespace {

std::string set_str(const std::set<int64_t>& s, int64_t n) {
  if (static_cast<int64_t>(s.size()) == n) return "all " + std::to_string(n);
  std::string r = "{";
  int k = 0;
  for (int64_t x : s) {
    if (k++ == 12) return r + ",...} of " + std::to_string(n);
    if (k > 1) r += ',';
    r += std::to_string(x);  // not "," + to_string(): gcc 12's false -Wrestrict (GCC PR 105329)
  }
  return r + "} of " + std::to_string(n);
}

// Spearman rank correlation of two equally long series (0 when degenerate).
double rank_corr(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = x.size();
  if (n < 4) return 0;
  auto ranks = [n](const std::vector<double>& v) {
    std::vector<size_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
    std::vector<double> r(n);
    for (size_t k = 0; k < n;) {
      size_t e = k;
      while (e + 1 < n && v[idx[e + 1]] == v[idx[k]]) ++e;
      for (size_t t = k; t <= e; ++t) r[idx[t]] = 0.5 * static_cast<double>(k + e);
      k = e + 1;
    }
    return r;
  };
  const auto rx = ranks(x), ry = ranks(y);
  const double mx = std::accumulate(rx.begin(), rx.end(), 0.0) / static_cast<double>(n);
  const double my = std::accumulate(ry.begin(), ry.end(), 0.0) / static_cast<double>(n);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t k = 0; k < n; ++k)
    sxy += (rx[k] - mx) * (ry[k] - my), sxx += (rx[k] - mx) * (rx[k] - mx), syy += (ry[k] - my) * (ry[k] - my);
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0;
}

}  // namespace

std::vector<std::string> anatomy(const Subject& s) {
  std::vector<std::string> lines;
  const Problem& p = s.p();
  auto line = [&](const std::ostringstream& o) { lines.push_back(o.str()); };

  // where in out
  std::set<int64_t> bs, hs, cols;
  std::vector<char> bad_row(static_cast<size_t>(s.rows()), 0);
  std::vector<double> row_ratio(static_cast<size_t>(s.rows()), 0.0);
  int64_t nonfinite = 0;
  for (size_t k = 0; k < s.out.size(); ++k) {
    const int64_t r = static_cast<int64_t>(k) / p.Dv;
    const double e = std::abs(s.out[k] - s.ref.out[k]) / std::max(s.tol_out[k], 1e-300);
    row_ratio[static_cast<size_t>(r)] = std::max(row_ratio[static_cast<size_t>(r)], std::isfinite(e) ? e : 1e300);
    if (!s.bad_out[k]) continue;
    bad_row[static_cast<size_t>(r)] = 1;
    bs.insert(r / (p.Hq * p.Lq)), hs.insert(r / p.Lq % p.Hq), cols.insert(static_cast<int64_t>(k) % p.Dv);
    nonfinite += std::isfinite(s.ref.out[k]) && !std::isfinite(s.out[k]);
  }
  const int64_t nrows = std::count(bad_row.begin(), bad_row.end(), 1);
  {
    std::ostringstream o;
    o << "out: " << s.n_bad_out << " of " << s.out.size() << " elements fail";
    if (s.n_bad_out)
      o << " in batches " << set_str(bs, p.B) << ", heads " << set_str(hs, p.Hq) << ", " << nrows << " of " << s.rows()
        << " rows, head-dim columns " << set_str(cols, p.Dv);
    if (nonfinite) o << "; " << nonfinite << " are NaN/Inf where a finite value was expected";
    line(o);
  }
  if (!s.lse.empty() || !s.w.empty()) {
    std::ostringstream o;
    o << "lse: "
      << (s.lse.empty() ? std::string("not produced")
                        : std::to_string(s.n_bad_lse) + " of " + std::to_string(s.lse.size()) + " fail")
      << "; weights: "
      << (s.w.empty() ? std::string("not produced")
                      : std::to_string(s.n_bad_w) + " of " + std::to_string(s.w.size()) + " fail");
    if (s.n_bad_out == 0 && s.n_bad_lse > 0) o << " (out right, lse wrong: the softmax statistics, not the weights)";
    if (s.n_bad_out > 0 && !s.lse.empty() && s.n_bad_lse == 0)
      o << " (lse right, out wrong: the denominator is right, P.V or the weights' use is not)";
    line(o);
  }
  if (nrows > 0) {
    int64_t fm = 0, padded = 0;
    for (int64_t r = 0; r < s.rows(); ++r) {
      if (!bad_row[static_cast<size_t>(r)]) continue;
      fm += s.row_visible[static_cast<size_t>(r)] == 0;
      const int64_t b = r / (p.Hq * p.Lq);
      padded += p.key_length(b) < p.Lk;
    }
    std::ostringstream o;
    o << "failing rows: " << fm << " fully masked";
    if (!p.key_lengths.empty()) o << ", " << padded << " in batches with padded keys";
    if (p.Hkv < p.Hq) {
      std::set<int64_t> groups;
      for (int64_t h : hs) groups.insert(p.kv_head(h));
      o << "; GQA: failing query heads fall in KV groups " << set_str(groups, p.Hkv);
      std::set<int64_t> tiled_differs;
      for (int64_t h = 0; h < p.Hq; ++h)
        if (h % p.Hkv != p.kv_head(h)) tiled_differs.insert(h);
      if (hs == tiled_differs) o << " (exactly the heads where h % Hkv != h / group)";
    }
    line(o);
  }

  // keys (from the weights when produced)
  if (!s.w.empty() && s.n_bad_w > 0) {
    std::map<int64_t, int64_t> rel;
    std::set<int64_t> keys;
    int64_t leak = 0, deficit = 0, win_edge = 0;
    for (int64_t r = 0; r < s.rows(); ++r) {
      const int64_t b = r / (p.Hq * p.Lq), i = r % p.Lq, diag = i + p.diagonal_offset(b);
      for (int64_t j = 0; j < p.Lk; ++j) {
        const size_t n = static_cast<size_t>(r * p.Lk + j);
        if (!s.bad_w[n]) continue;
        keys.insert(j);
        if (p.causal || p.has_window()) ++rel[j - diag];
        if (!s.vis[n])
          ++leak;
        else if (std::abs(s.w[n]) <= s.tol_w[n])
          ++deficit;
        win_edge += (p.window_left >= 0 && (j == diag - p.window_left - 1 || j == diag - p.window_left)) ||
                    (p.window_right >= 0 && (j == diag + p.window_right + 1 || j == diag + p.window_right));
      }
    }
    std::ostringstream o;
    o << "weights: failing keys " << set_str(keys, p.Lk) << "; " << leak << " on masked keys (leak), " << deficit
      << " visible keys read as 0 (skipped)";
    if (p.has_window()) o << ", " << win_edge << " at a window edge";
    const int64_t j_min = keys.empty() ? 0 : *keys.begin();
    for (int64_t T : {8, 16, 32, 64, 128})
      if (p.Lk > T && p.Lk % T && j_min >= p.Lk / T * T) {
        o << "; all in the last partial key tile of size " << T << " (keys " << p.Lk / T * T << ".." << p.Lk - 1 << ")";
        break;
      }
    line(o);
    if (!rel.empty()) {
      std::ostringstream d;
      d << "failing weights by key offset from the diagonal (j - i - offset):";
      int k = 0;
      for (auto [off, n] : rel)
        if (k++ < 8) d << " " << (off > 0 ? "+" : "") << off << ":" << n;
      if (rel.size() > 8) d << " ...";
      line(d);
    }
  }

  // growth
  std::vector<double> ratio, nvis, mag;
  for (int64_t r = 0; r < s.rows(); ++r)
    if (s.row_visible[static_cast<size_t>(r)] > 0) {
      ratio.push_back(row_ratio[static_cast<size_t>(r)]),
          nvis.push_back(static_cast<double>(s.row_visible[static_cast<size_t>(r)]));
      mag.push_back(std::abs(s.row_max[static_cast<size_t>(r)]));
    }
  if (nrows >= 4) {
    std::ostringstream o;
    o.precision(2);
    o << "growth (rank correlation of a row's worst error/tolerance): with visible keys " << rank_corr(ratio, nvis)
      << ", with |max logit| " << rank_corr(ratio, mag);
    line(o);
  }
  return lines;
}

}  // namespace attncheck::diagnose
