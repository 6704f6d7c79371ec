// Judging a kernel's own partial states (attncheck/state_partials.hpp): each key range cut out as a problem of its
// own and judged like any attention result, so the tolerance is the attention one, derived for that range.
#include "attncheck/state_partials.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "attncheck/features.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {
inline namespace tolerance {

namespace {

// The fields a key range keeps the meaning of; everything else stays at its default.
Problem plain_copy(const Problem& p) {
  Problem q;
  q.B = p.B, q.Hq = p.Hq, q.Hkv = p.Hkv, q.Lq = p.Lq, q.Lk = p.Lk, q.Dqk = p.Dqk, q.Dv = p.Dv;
  q.dtype = p.dtype, q.layout = p.layout, q.scale = p.scale;
  q.causal = p.causal, q.alignment = p.alignment, q.causal_offset = p.causal_offset,
  q.causal_offsets = p.causal_offsets;
  q.key_lengths = p.key_lengths, q.window_left = p.window_left, q.window_right = p.window_right;
  for (const ModEntry& m : logit_modifications())  // a per-score stage: a key range keeps its meaning
    set_logit_parameter(q, m, logit_parameter(p, m));
  q.fully_masked = p.fully_masked, q.want_lse = p.want_lse;
  return q;
}

}  // namespace

std::string partials_unjudgeable(const Problem& p) {
  // The name is lossless (one component per non-default field), so equal names mean no other feature is on.
  const std::string plain = plain_copy(p).name(), full = p.name();
  if (plain == full) return "";
  std::string logit;
  for (const ModEntry& m : logit_modifications()) logit += std::string(logit.empty() ? "" : ", ") + m.name;
  return "the partial states of " + full +
         " cannot be judged: a key range of it does not keep its meaning alone "
         "(judged: plain GQA attention with causal, window, key padding and " +
         logit + " only)";
}

PartialsVerdict judge_partials(const Problem& p, const Inputs& in, const KernelPartials& k) {
  if (const std::string why = partials_unjudgeable(p); !why.empty()) throw std::invalid_argument(why);
  const size_t n = k.states.size();
  if (n == 0 || k.begin.size() != n || k.end.size() != n)
    throw std::invalid_argument("kernel partials: " + std::to_string(n) + " states, " + std::to_string(k.begin.size()) +
                                " begins, " + std::to_string(k.end.size()) + " ends");
  PartialsVerdict verdict;
  for (size_t c = 0; c < n; ++c) {
    const int64_t j0 = k.begin[c], j1 = k.end[c];
    const State& s = k.states[c];
    const std::string range = "keys [" + std::to_string(j0) + ", " + std::to_string(j1) + ")";
    if (j0 < 0 || j1 > p.Lk || j0 >= j1)
      throw std::invalid_argument("kernel partials: part " + std::to_string(c) + " covers " + range + ", outside [0, " +
                                  std::to_string(p.Lk) + ") or empty");
    if (s.B != p.B || s.H != p.Hq || s.L != p.Lq || s.D != p.Dv)
      throw std::invalid_argument("kernel partials: part " + std::to_string(c) +
                                  " has another shape than [B,Hq,Lq,Dv]");
    // The range as a problem: its keys only, every diagonal where it was (explicit offsets), padding cut to it.
    Problem sub = plain_copy(p);
    sub.Lk = j1 - j0, sub.alignment = Alignment::explicit_, sub.causal_offset = 0, sub.causal_offsets.clear();
    for (int64_t b = 0; b < p.B; ++b) sub.causal_offsets.push_back(p.diagonal_offset(b) - j0);
    if (!p.key_lengths.empty())
      for (int64_t b = 0; b < p.B; ++b)
        sub.key_lengths[static_cast<size_t>(b)] = std::clamp(p.key_length(b) - j0, int64_t{0}, sub.Lk);
    sub.scale = p.effective_scale(), sub.fully_masked = FullyMasked::zero, sub.want_lse = true;
    Inputs part{in.q, make_qkv(sub, 1), make_qkv(sub, 2), {}, {}, {}, {}, {}};
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < sub.Lk; ++j) {
          for (int64_t d = 0; d < p.Dqk; ++d) part.k.put(b, h, j, d, in.k.at(b, h, j0 + j, d));
          for (int64_t d = 0; d < p.Dv; ++d) part.v.put(b, h, j, d, in.v.at(b, h, j0 + j, d));
        }
    const ExpectedAttention ref = expected_attention(sub, part);
    Outputs got = make_outputs(sub);
    for (int64_t r = 0; r < s.rows(); ++r) {
      const int64_t b = r / (p.Hq * p.Lq), h = (r / p.Lq) % p.Hq, i = r % p.Lq;
      const int64_t at[3] = {b, h, i};
      got.lse->set(at, s.empty(r) ? -std::numeric_limits<double>::infinity() : s.lse(r));
      for (int64_t d = 0; d < p.Dv; ++d) got.out.put(b, h, i, d, s.out(r, d));
    }
    const Verdict v = judge(sub, ref, got);
    verdict.pass = verdict.pass && v.pass;
    verdict.lines.push_back(range + ": " + (v.pass ? "pass (worst " : "FAIL ") + v.worst().describe() +
                            (v.pass ? ")" : ""));
  }
  return verdict;
}

}  // namespace tolerance
}  // namespace attncheck
