// Hypotheses about which keys a kernel read: one whole key tile never read (any position, tile sizes 16..128), one
// key never read in every row, one key per row never read, or one masked key per row read (both found per row).
// Removing a key set S from the reference's softmax gives out' = (out - sum_S w_j v_j) / (1 - sum_S w_j) and lse' = lse
// + log(1 - sum_S w_j); adding a masked key e with unmasked score x_e gives out' = (out + w v_e) / (1 + w), w = exp(x_e
// - lse). Where the keys found sit on a mask edge (the causal diagonal, a window edge, the first padded key), the
// edge's tag is reported too: an edge bug moves exactly that key, a skipped or leaked key anywhere else is not one.
#include <cmath>
#include <map>
#include <string>
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

// out and lse of row r with the masked key j read as well; false when it cannot change anything.
bool add_key(const Subject& s, int64_t r, int64_t j, double* out, double& lse) {
  const Problem& p = s.p();
  const int64_t b = r / (p.Hq * p.Lq), h = r / p.Lq % p.Hq;
  const double l = s.ref.lse[static_cast<size_t>(r)], x = s.unmasked_score(r, j);
  if (!std::isfinite(l) || !std::isfinite(x)) return false;
  const double w = std::exp(x - l);
  if (!std::isfinite(w) || w == 0) return false;
  for (int64_t d = 0; d < p.Dv; ++d)
    out[d] = (s.ref.out[static_cast<size_t>(r * p.Dv + d)] + w * s.c.in.v.at(b, p.kv_head(h), j, d)) / (1 + w);
  lse = l + std::log1p(w);
  return true;
}

// The mask edge key j sits on in row r ("" when none): a key read that should not be (`extra`) just past the
// causal diagonal or outside a window edge, or the first padded key; a key not read on the diagonal or a window edge.
std::string edge_of(const Subject& s, int64_t r, int64_t j, bool extra) {
  const Problem& p = s.p();
  const int64_t b = r / (p.Hq * p.Lq), diag = r % p.Lq + p.diagonal_offset(b);
  const int64_t e = extra ? 1 : 0;
  if (p.causal && j == diag + e) return "causal-diagonal";
  if (p.window_left >= 0 && j == diag - p.window_left - e) return "window-edge";
  if (p.window_right >= 0 && j == diag + p.window_right + e) return "window-edge";
  if (extra && !p.key_lengths.empty() && j == p.key_lengths[static_cast<size_t>(b)]) return "key-padding";
  return "";
}

// Per failing row, the single key whose change (`extra`: a masked key read; else a visible key dropped) brings the
// row closest to the candidate; reports the edge tag when every row's key is on that edge, and a dropped key as
// skipped-keys in any case.
template <class Add>
void one_key_per_row(const Subject& s, bool extra, const Add& add) {
  const Problem& p = s.p();
  std::vector<double> pred = s.ref.out, lse = s.ref.lse;
  int64_t rows = 0, max_key = 0;
  std::map<std::string, int64_t> edges;
  std::vector<double> row(static_cast<size_t>(p.Dv));
  for (int64_t r = 0; r < s.rows(); ++r) {
    bool bad = false;
    for (int64_t d = 0; d < p.Dv && !bad; ++d) bad = s.bad_out[static_cast<size_t>(r * p.Dv + d)];
    if (!bad) continue;
    int64_t best_j = -1;
    double best_err = INFINITY;
    for (int64_t j = 0; j < p.Lk; ++j) {
      if (extra == static_cast<bool>(s.vis[static_cast<size_t>(r * p.Lk + j)])) continue;
      double row_lse = 0;
      if (!(extra ? add_key(s, r, j, row.data(), row_lse) : drop_keys(s, r, j, j + 1, row.data(), row_lse))) continue;
      double err = 0;
      for (int64_t d = 0; d < p.Dv; ++d) {
        const size_t k = static_cast<size_t>(r * p.Dv + d);
        err = std::max(err, std::abs(row[static_cast<size_t>(d)] - s.out[k]) / s.tol_out[k]);
      }
      if (err < best_err) best_err = err, best_j = j;
    }
    if (best_j < 0) continue;
    if (extra)
      add_key(s, r, best_j, &pred[static_cast<size_t>(r * p.Dv)], lse[static_cast<size_t>(r)]);
    else
      drop_keys(s, r, best_j, best_j + 1, &pred[static_cast<size_t>(r * p.Dv)], lse[static_cast<size_t>(r)]);
    ++rows;
    max_key += !extra && s.score[static_cast<size_t>(r * p.Lk + best_j)] == s.row_max[static_cast<size_t>(r)];
    ++edges[edge_of(s, r, best_j, extra)];
  }
  if (rows == 0) return;
  for (const auto& [tag, n] : edges)
    if (!tag.empty() && n == rows)
      add(tag,
          std::string(extra ? "one masked key read per row, the key just past "
                            : "one key per row never read, the key on ") +
              (tag == "causal-diagonal" ? "the causal diagonal"
               : tag == "window-edge"   ? "a window edge"
                                        : "the key padding") +
              ", in " + std::to_string(rows) + " failing rows",
          pred, &lse);
  // A best-fitting masked key off every edge is no known bug (with ~Lk candidates per row it can fit noise).
  if (!extra)
    add("skipped-keys",
        "one key per row never read (the row's highest-scoring key in " + std::to_string(max_key) + " of " +
            std::to_string(rows) + " rows)",
        pred, &lse);
}

}  // namespace

void key_hypotheses(const Subject& s,
                    const std::function<void(const std::string&, const std::string&, const std::vector<double>&,
                                             const std::vector<double>*)>& add) {
  const Problem& p = s.p();
  if (p.dropout_p > 0 || s.n_bad_out + s.n_bad_lse == 0 || s.rows() * p.Lk * p.Dv > (int64_t{1} << 26)) return;
  // one tile of T keys skipped in every row; T = 1: the same single key in every row. These also fit a failure that
  // shows only in lse (a key of little weight moves lse = log sum by more than its tolerance, out by less), since
  // one key set must then explain every row at once.
  // A single key fits one row's error as freely as the per-row models do; it is tried only when it must explain
  // several failing rows at once.
  int64_t failing_rows = 0;
  for (int64_t r = 0; r < s.rows(); ++r) {
    bool bad = !s.lse.empty() && s.bad_lse[static_cast<size_t>(r)];
    for (int64_t d = 0; d < p.Dv && !bad; ++d) bad = s.bad_out[static_cast<size_t>(r * p.Dv + d)];
    failing_rows += bad;
  }
  for (int64_t T : {1, 16, 32, 64, 128}) {
    if (p.Lk < 2 * T || (T == 1 && failing_rows < 2)) continue;
    int64_t best_t = -1, best_left = s.n_bad_out + s.n_bad_lse, ties = 0;
    std::vector<double> best_out, best_lse;
    for (int64_t t = 0; t * T < p.Lk; ++t) {
      std::vector<double> pred = s.ref.out, lse = s.ref.lse;
      for (int64_t r = 0; r < s.rows(); ++r)
        drop_keys(s, r, t * T, std::min(p.Lk, (t + 1) * T), &pred[static_cast<size_t>(r * p.Dv)],
                  lse[static_cast<size_t>(r)]);
      const int64_t left = s.bad_against(pred) + s.bad_lse_against(lse);
      if (left == best_left && best_t >= 0) ++ties;
      if (left < best_left)
        best_left = left, best_t = t, ties = 0, best_out = std::move(pred), best_lse = std::move(lse);
    }
    if (best_t < 0) continue;
    // Where the dropped keys hold about equal weight (near one-hot rows), other positions fit as well: say so.
    const std::string also =
        ties ? " (" + std::to_string(ties) + " other positions fit as well: the place is not identified)" : "";
    if (T == 1)
      add("skipped-keys", "key " + std::to_string(best_t) + " never read (in every row)" + also, best_out, &best_lse);
    else
      add("skipped-keys",
          "key tile " + std::to_string(best_t) + " of size " + std::to_string(T) + " (keys " +
              std::to_string(best_t * T) + ".." + std::to_string(std::min(p.Lk, (best_t + 1) * T) - 1) +
              ") never read" + also,
          best_out, &best_lse);
  }
  if (s.n_bad_out == 0) return;    // per row, one key fits a single lse value too easily
  one_key_per_row(s, false, add);  // a visible key never read
  one_key_per_row(s, true, add);   // a masked key read
}

}  // namespace attncheck::diagnose
