// The query rows a long-context verification computes with the reference (reference_attention_rows): the rows where
// attention kernels go wrong (first/last, tile edges, mask boundaries, fully masked, the largest logits) and an even
// spread of the others. docs/tolerance.md, "Sampled rows".
#include <algorithm>
#include <cmath>
#include <set>

#include "attncheck/reference.hpp"

namespace attncheck {
inline namespace oracle {

std::vector<int64_t> sample_rows(const Problem& p, const Inputs& in, int64_t n) {
  const int64_t Lq = p.Lq;
  std::vector<int64_t> all;
  if (n <= 0 || n >= Lq) {
    for (int64_t i = 0; i < Lq; ++i) all.push_back(i);
    return all;
  }
  std::set<int64_t> s;
  auto add = [&](int64_t i) {
    if (i >= 0 && i < Lq) s.insert(i);
  };
  auto around = [&](int64_t i) { add(i - 1), add(i), add(i + 1); };
  add(0), add(Lq - 1);
  // Mask boundaries per batch: the diagonal entering the keys (rows before it are fully masked under causal), the
  // diagonal reaching the last valid key, the window's left edge entering the keys.
  const bool diagonal = p.causal || p.window_left >= 0 || p.window_right >= 0;
  for (int64_t b = 0; diagonal && b < p.B; ++b) {
    const int64_t off = p.diagonal_offset(b);
    around(-off);
    around(p.key_length(b) - 1 - off);
    if (p.window_left >= 0) around(p.window_left - off);
    if (p.window_right >= 0) around(-p.window_right - off);
  }
  // Query tile edges (multiples of 64, which include those of 128, and their neighbours), spread over at most n/2 rows.
  const int64_t edges = Lq / 64, budget = std::max<int64_t>(1, n / 6);
  for (int64_t t = 1; t <= edges; t += std::max<int64_t>(1, edges / budget)) around(t * 64);
  // The largest bound on |logit|: |s_ij| <= |scale| |q_i| |k_j| (+ bias), so the rows with the largest |q_i|.
  std::vector<std::pair<double, int64_t>> norm(static_cast<size_t>(Lq));
  for (int64_t i = 0; i < Lq; ++i) {
    double m = 0;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h) {
        double q2 = 0;
        for (int64_t d = 0; d < p.Dqk; ++d) q2 += in.q.at(b, h, i, d) * in.q.at(b, h, i, d);
        m = std::max(m, q2);
      }
    norm[static_cast<size_t>(i)] = {m, i};
  }
  std::sort(norm.begin(), norm.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int64_t k = 0; k < std::max<int64_t>(1, n / 8); ++k) add(norm[static_cast<size_t>(k)].second);
  // The rest evenly spaced.
  const int64_t rest = n - static_cast<int64_t>(s.size());
  for (int64_t k = 0; k < rest; ++k) add((2 * k + 1) * Lq / (2 * rest));
  return {s.begin(), s.end()};
}

}  // namespace oracle
}  // namespace attncheck
