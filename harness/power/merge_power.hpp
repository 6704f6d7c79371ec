// Detection power for merges (docs/states.md "Power"): an fp32 merge with one injected mistake per bug class, and
// correct-but-different merges, each run on the merge fixtures and judged by the derived bound.
#pragma once

#include <string>
#include <vector>

#include "attncheck/state.hpp"

namespace attncheck::power {

struct MergeVariant {
  std::string name;
  std::string expect;  // the diagnosis tag the fault should get; "" for a correct variant
  int fault = 0;       // internal switch (merge_power.cpp)
};
const std::vector<MergeVariant>& merge_variants();
// Runs variant v in fp32 into `out` (pre-allocated by make_merge_outputs).
void run_merge_variant(const MergeVariant& v, const MergeProblem& p, const StoredStates& in, StoredStates& out);

}  // namespace attncheck::power
