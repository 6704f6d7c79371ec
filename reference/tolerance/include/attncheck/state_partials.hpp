// A kernel's own partial states (docs/states.md "A kernel's own partial states"): the states an attention kernel's
// key split computes before its merge, each judged against the reference attention over the same keys.
#pragma once

#include <string>
#include <vector>

#include "attncheck/problem.hpp"
#include "attncheck/state.hpp"

namespace attncheck {
inline namespace tolerance {

// Part k covers keys [begin[k], end[k]) of every batch row; states[k] is the kernel's state of those keys in fp64
// (its accumulators widened exactly): m in nats, l, and u unnormalised, [B,Hq,Lq] and [B,Hq,Lq,Dv] as in State.
struct KernelPartials {
  std::vector<int64_t> begin, end;
  std::vector<State> states;
};

// Empty when the partial states of `p` can be judged, else why not. A key range must keep its meaning when cut out
// of the problem: plain GQA attention with causal (any alignment), window, key padding and the logit stage; nothing
// that ties a key to the rest of its row (sinks, a finite fill, dropout, masks and biases by position, rotary
// positions, KV cache or varlen sequences, expressions) and no weights or scores output.
std::string partials_unjudgeable(const Problem& p);

struct PartialsVerdict {
  bool pass = true;
  std::vector<std::string> lines;  // one per part: "keys [a, b): pass (worst ...)" or "keys [a, b): FAIL ..."
};
// Each part as an attention problem of its own: the keys of the range (causal and window diagonals kept where they
// were, key padding cut to the range), judged by the attention tolerance (docs/tolerance.md) with the part's
// normalised O = u / l and lse = m + ln l as its outputs; a row without a visible key in the range must be the
// empty state (O = 0, lse = -inf). Throws std::invalid_argument when the problem is unjudgeable or the parts do not
// match the problem (their count, shapes or ranges).
PartialsVerdict judge_partials(const Problem& p, const Inputs& in, const KernelPartials& k);

}  // namespace tolerance
}  // namespace attncheck
