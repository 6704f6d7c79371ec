// Diagnosis of a failing merge (docs/states.md "Diagnosis"): the candidate's merged state is compared with what
// each known mistake would have produced from the same stored states (fp64 models), and the mistake that explains
// the failing elements is named by its tag.
#pragma once

#include <string>
#include <vector>

#include "attncheck/state.hpp"

namespace attncheck {

struct MergeDiagnosis {
  std::string tag =
      "unknown";         // empty-state-nan, lse-sentinel, lse-layout, merge-unnormalised, split-boundary, lse-base
  std::string why;       // the model and how much of the failure it explains
  double explained = 0;  // fraction of the failing rows' elements the model reproduces
};

// The tags, in the order ties are broken.
const std::vector<std::string>& merge_tags();
MergeDiagnosis diagnose_merge(const MergeProblem& p, const StoredStates& in, const StoredStates& out);

}  // namespace attncheck
