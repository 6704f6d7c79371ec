// Smallest repro: a failing case reduced greedily — one packed sequence (varlen), the contiguous
// problem a paged cache stands for (when the failure survives it), one batch, one KV group, one query head, half
// the query rows at a time, the shortest failing key prefix then suffix, the fewest head-dim columns, the features it
// does not need — while the candidate still fails with the same top diagnosis. The result is an ordinary case; the
// CLI writes it as a regression fixture (repro.hpp).
#pragma once

#include <functional>
#include <string>

#include "diagnosis.hpp"

namespace attncheck::diagnose {

// A sub-problem in the original's coordinates: batches [b0, b0+nb), query heads [h0, h0+nh) reading KV heads
// [g0, g0+ng), query rows [i0, i0+nq), keys [k0, k0+nk), the first dqk / dv head-dim columns.
struct Cut {
  int64_t b0 = 0, nb = 1, h0 = 0, nh = 1, g0 = 0, ng = 1, i0 = 0, nq = 1, k0 = 0, nk = 1, dqk = 1, dv = 1;
};
Cut whole(const Problem& p);
// The case restricted to the cut. Every kept query row sees exactly the kept keys it saw before (causal and window
// alignment re-expressed as an offset when needed, key lengths clipped to the kept keys); masks, bias, dropout
// keep-mask, sinks and the KV-cache past are cut alike; a paged cache keeps its pool (cut to the kept KV heads and
// columns) and the kept rows and pages of its block table. Throws std::invalid_argument for an inconsistent cut
// (heads that do not form whole GQA groups; with a KV-cache past, keys that do not start at 0 or end inside the
// past; with a paged cache, keys that do not start at a page boundary; any cut of a varlen problem).
prop::Case cut(const prop::Case& c, const Cut& k);

struct Reduction {
  prop::Case reduced;   // the smallest failing case found (the original when nothing could be removed)
  Diagnosis diagnosis;  // of the reduced case (with probes when the options allow re-runs)
  int reruns = 0;       // candidate runs spent, the trial diagnoses' probes included
  int steps = 0;        // reductions accepted
};

// `top` is the original diagnosis's top tag: a reduction is kept when the candidate still fails and the reduced
// diagnosis ranks `top` first ("no known signature": any failure). Deterministic; at most `budget` candidate runs.
Reduction reduce(const prop::Case& c, const Impl& impl, const std::string& top, const Options& o, int budget = 200);
// The same steps with another failure: a step is kept when `fails` holds on the reduced case (an invariance check
// still violated, say); at most `budget` calls of it, each counted in reruns. The diagnosis is left empty.
Reduction reduce_while(const prop::Case& c, const std::function<bool(const prop::Case&)>& fails, int budget = 200);

}  // namespace attncheck::diagnose
