// Hypotheses about keys a kernel never read: one whole key tile (any position, tile sizes 16..128), or one key per
// row (found per row; reported with how often it is the row's highest-scoring key). Removing a key set S from the
// reference's softmax gives out' = (out - sum_S w_j v_j) / (1 - sum_S w_j) and lse' = lse + log(1 - sum_S w_j).
#include <cmath>
#include <sstream>

#include "hypotheses.hpp"

namespace attncheck::diagnose {

namespace {

// Reference weight of key j in row r (0 when masked).
double weight(const Subject& s, int64_t r, int64_t j) {
  const size_t n = static_cast<size_t>(r * s.p().Lk + j);
  return s.vis[n] ? std::exp(s.score[n] - s.ref.lse[static_cast<size_t>(r)]) : 0.0;
}

// out (Dv values at `out`) and lse of row r without the keys in [j0, j1); false when nothing changes.
bool drop_keys(const Subject& s, int64_t r, int64_t j0, int64_t j1, double* out, double& lse) {
  const Problem& p = s.p();
  const int64_t b = r / (p.Hq * p.Lq), h = r / p.Lq % p.Hq;
  double wsum = 0;
  std::vector<double> removed(static_cast<size_t>(p.Dv), 0.0);
  for (int64_t j = j0; j < j1; ++j) {
    const double w = weight(s, r, j);
    if (w == 0) continue;
    wsum += w;
    for (int64_t d = 0; d < p.Dv; ++d) removed[static_cast<size_t>(d)] += w * s.c.in.v.at(b, p.kv_head(h), j, d);
  }
  if (wsum == 0 || wsum >= 1 - 1e-12) return false;
  for (int64_t d = 0; d < p.Dv; ++d)
    out[d] = (s.ref.out[static_cast<size_t>(r * p.Dv + d)] - removed[static_cast<size_t>(d)]) / (1 - wsum);
  lse = s.ref.lse[static_cast<size_t>(r)] + std::log1p(-wsum);
  return true;
}

}  // namespace

void key_hypotheses(const Subject& s, const std::function<void(const std::string&, const std::string&, const std::vector<double>&,
                                                                 const std::vector<double>*)>& add) {
  const Problem& p = s.p();
  if (p.dropout_p > 0 || s.n_bad_out == 0 || s.rows() * p.Lk * p.Dv > (int64_t{1} << 26)) return;
  // one tile of T keys skipped in every row
  for (int64_t T : {16, 32, 64, 128}) {
    if (p.Lk < 2 * T) continue;
    int64_t best_t = -1, best_left = s.n_bad_out;
    std::vector<double> best_out, best_lse;
    for (int64_t t = 0; t * T < p.Lk; ++t) {
      std::vector<double> pred = s.ref.out, lse = s.ref.lse;
      for (int64_t r = 0; r < s.rows(); ++r)
        drop_keys(s, r, t * T, std::min(p.Lk, (t + 1) * T), &pred[static_cast<size_t>(r * p.Dv)], lse[static_cast<size_t>(r)]);
      const int64_t left = s.bad_against(pred);
      if (left < best_left) best_left = left, best_t = t, best_out = std::move(pred), best_lse = std::move(lse);
    }
    if (best_t >= 0)
      add("skipped-keys", "key tile " + std::to_string(best_t) + " of size " + std::to_string(T) + " (keys " +
          std::to_string(best_t * T) + ".." + std::to_string(std::min(p.Lk, (best_t + 1) * T) - 1) + ") never read",
          best_out, &best_lse);
  }
  // one key per failing row
  std::vector<double> pred = s.ref.out, lse = s.ref.lse;
  int64_t rows = 0, max_key = 0, diagonal = 0;
  for (int64_t r = 0; r < s.rows(); ++r) {
    bool bad = false;
    for (int64_t d = 0; d < p.Dv && !bad; ++d) bad = s.bad_out[static_cast<size_t>(r * p.Dv + d)];
    if (!bad) continue;
    int64_t best_j = -1;
    double best_err = INFINITY;
    std::vector<double> row(static_cast<size_t>(p.Dv));
    for (int64_t j = 0; j < p.Lk; ++j) {
      double row_lse = 0;
      if (!drop_keys(s, r, j, j + 1, row.data(), row_lse)) continue;
      double err = 0;
      for (int64_t d = 0; d < p.Dv; ++d) {
        const size_t k = static_cast<size_t>(r * p.Dv + d);
        err = std::max(err, std::abs(row[static_cast<size_t>(d)] - s.out[k]) / s.tol_out[k]);
      }
      if (err < best_err) best_err = err, best_j = j;
    }
    if (best_j < 0) continue;
    drop_keys(s, r, best_j, best_j + 1, &pred[static_cast<size_t>(r * p.Dv)], lse[static_cast<size_t>(r)]);
    ++rows;
    double m = -INFINITY;
    for (int64_t j = 0; j < p.Lk; ++j)
      if (s.vis[static_cast<size_t>(r * p.Lk + j)]) m = std::max(m, s.score[static_cast<size_t>(r * p.Lk + j)]);
    max_key += s.score[static_cast<size_t>(r * p.Lk + best_j)] == m;
    diagonal += p.causal && best_j == r % p.Lq + p.diagonal_offset(r / (p.Hq * p.Lq));
  }
  if (rows > 0 && diagonal == rows)
    add("causal-diagonal", "the diagonal key (j = i + offset) excluded in " + std::to_string(rows) + " failing rows", pred, &lse);
  if (rows > 0)
    add("skipped-keys", "one key per row never read (the row's highest-scoring key in " + std::to_string(max_key) + " of " +
        std::to_string(rows) + " rows)", pred, &lse);
}

}  // namespace attncheck::diagnose
