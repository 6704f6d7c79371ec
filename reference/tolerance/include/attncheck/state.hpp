// The judgement of a merged attention state (docs/states.md, "Tolerance of a merged result"): the derived
// per-element bound of a merged result against the reference merge. Includes the merge problem and the oracle's
// states and merges, so one include gives the whole of docs/states.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/merge_problem.hpp"
#include "attncheck/state_merge.hpp"

namespace attncheck {
inline namespace tolerance {

// Per element: the derived bound (docs/states.md, "Tolerance of a merged result") and the verdict.
struct MergeVerdict {
  bool pass = true;
  int64_t checked = 0, failed = 0;
  std::string worst;              // "o[b,h,i,d]: expected x, got y, |err| e > tol t" of the worst element
  double worst_ratio = 0;         // max |err| / tol over judged elements (inf for a non-finite or wrong sentinel)
  std::vector<int64_t> bad_rows;  // rows (b·H + h)·L + i with a failed element
};
MergeVerdict judge_merge(const MergeProblem& p, const StoredStates& in, const StoredStates& out);

}  // namespace tolerance
}  // namespace attncheck
