// The merge suite spec (golden/suite-states.json; docs/states.md "Fixtures"): each case names how its states are
// made (a split of the keys, a cascade, a chunked prefill, or states drawn directly for hostile lse values) and the
// conventions they are stored in; building a case computes the partial states with the fp64 reference.
#pragma once

#include <string>
#include <vector>

#include "attncheck/state_fixture.hpp"

namespace attncheck {

// Whether the JSON file at `path` is a merge suite (top-level "kind": "merge").
bool is_merge_suite(const std::string& path);

struct MergeSuite {
  std::string file_name, subdir;
  std::vector<MergeFixture> cases;
};
// Reads and builds every case (std::invalid_argument naming the file, the case and the field on bad input).
MergeSuite build_merge_suite(const std::string& path);

}  // namespace attncheck
