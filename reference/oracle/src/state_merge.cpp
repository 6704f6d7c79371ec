// The oracle's states (docs/states.md): partial attention over a key range and the merge, both in fp64 loops, and
// the reference merge of stored states.
#include "attncheck/state_merge.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace attncheck {
inline namespace oracle {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw std::invalid_argument("merge problem: field '" + field + "': " + what);
}

}  // namespace

State partial_state(const PartialSpec& s, const Tensor& q, const Tensor& k, const Tensor& v,
                    const std::vector<int64_t>& begin, const std::vector<int64_t>& end) {
  if (s.Hkv < 1 || s.Hq % s.Hkv != 0) bad("Hq", "must be a multiple of Hkv");
  State st = empty_state(s.B, s.Hq, s.Lq, s.D);
  const int64_t group = s.Hq / s.Hkv;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t j0 = begin.size() == 1 ? begin[0] : begin.at(static_cast<size_t>(b));
    const int64_t j1 = end.size() == 1 ? end[0] : end.at(static_cast<size_t>(b));
    if (j0 < 0 || j1 > s.Lk || j0 > j1) {
      std::string range = "[";
      range += std::to_string(j0) + ", " + std::to_string(j1) + ") outside [0, Lk]";
      bad("key range", range);
    }
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t hk = h / group;  // GQA: query head h reads KV head h / (Hq / Hkv)
      for (int64_t i = 0; i < s.Lq; ++i) {
        const int64_t r = (b * s.Hq + h) * s.Lq + i;
        std::vector<double> score;  // the visible keys of the range, in order
        std::vector<int64_t> key;
        for (int64_t j = j0; j < j1; ++j) {
          if (s.causal && j > i + s.Lk - s.Lq) continue;  // bottom-right causal: masked, skipped explicitly
          double dot = 0;
          for (int64_t d = 0; d < s.D; ++d) dot += q.at(b, h, i, d) * k.at(b, hk, j, d);
          score.push_back(dot * s.scale), key.push_back(j);
        }
        if (score.empty()) continue;  // an empty state: l = 0, m = -inf, u = 0
        const double m = *std::max_element(score.begin(), score.end());
        double l = 0;
        for (size_t t = 0; t < score.size(); ++t) {
          const double w = std::exp(score[t] - m);
          l += w;
          for (int64_t d = 0; d < s.D; ++d) st.u[r * s.D + d] += w * v.at(b, hk, key[t], d);
        }
        st.m[r] = m, st.l[r] = l;
      }
    }
  }
  return st;
}

State merge_states(const std::vector<State>& states) {
  if (states.empty()) bad("N", "a merge needs at least one state");
  const State& f = states[0];
  State out = empty_state(f.B, f.H, f.L, f.D);
  for (const State& s : states)
    if (s.B != f.B || s.H != f.H || s.L != f.L || s.D != f.D) bad("states", "states of different shapes");
  for (int64_t r = 0; r < f.rows(); ++r) {
    double m = -kInf;
    for (const State& s : states)
      if (!s.empty(r)) m = std::max(m, s.m[r]);
    if (m == -kInf) continue;  // every state empty: the merge is empty
    for (const State& s : states) {
      if (s.empty(r)) continue;  // contributes nothing, whatever its u holds
      const double w = std::exp(s.m[r] - m);
      out.l[r] += w * s.l[r];
      for (int64_t d = 0; d < f.D; ++d) out.u[r * f.D + d] += w * s.u[r * f.D + d];
    }
    out.m[r] = m;
  }
  return out;
}

MergeExpected reference_merge(const MergeProblem& p, const StoredStates& in) {
  std::vector<State> states;
  for (int64_t n = 0; n < p.N; ++n) states.push_back(decode_state(p, in, n));
  return {merge_states(states)};
}

std::vector<double> merged_exponent(const MergeProblem& p, const StoredStates& in) {
  const bool norm = p.conv.form == StateForm::normalised;
  const double sentinel = empty_stat_value(p.conv);
  std::vector<double> x(static_cast<size_t>(p.B * p.H * p.L), sentinel);
  for (int64_t r = 0; r < p.B * p.H * p.L; ++r) {
    bool any = false;
    for (int64_t n = 0; n < p.N; ++n) {
      const double v = stored_stat(norm ? *in.lse : *in.max, p, n, r);
      if (v == sentinel || (!norm && stored_stat(*in.sum, p, n, r) == 0)) continue;
      x[static_cast<size_t>(r)] = any ? std::max(x[static_cast<size_t>(r)], v) : v;
      any = true;
    }
  }
  return x;
}

}  // namespace oracle
}  // namespace attncheck
