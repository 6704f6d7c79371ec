// Merge fixtures (docs/states.md, golden/SCHEMA.md "Merge fixtures"): N stored attention states under declared
// conventions, the fp64 merge of them, and provenance. A root attribute kind = "merge" tells them from attention
// fixtures, so `verify --fixtures golden` judges both kinds in one run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/state.hpp"

namespace attncheck {

struct MergeFixture {
  MergeProblem problem;
  StoredStates inputs;      // o [N,B,H,L,D] (dtype), lse or max+sum [N,B,H,L] (fp32, the declared layout)
  std::string source;       // what made the states: "split", "cascade", "chunked" or "states" (drawn directly)
  std::string description;  // the hostile point of the case, in words
  uint64_t seed = 0;
  std::string command;  // the command that made it
};

// Whether `path` is an HDF5 file whose root attribute kind is "merge" (false for attention fixtures and anything
// unreadable: those go down the attention fixtures' path and its errors).
bool is_merge_fixture(const std::string& path);
// Moves the merge fixtures out of `files` (kept in order) and returns them; every file is opened once, all of them in
// one vetting child (untrusted.hpp).
std::vector<std::string> take_merge_fixtures(std::vector<std::string>& files);
// The bytes write_merge_fixture writes, deterministic (the expected merge computed from the inputs in fp64).
std::string merge_fixture_image(const std::string& path, const MergeFixture& f);
void write_merge_fixture(const std::string& path, const MergeFixture& f);
// Throws std::invalid_argument "<path>: <field>: <what>"; the stored expectation must equal the reference merge of
// the stored inputs (a file edited by hand is refused, not judged against a wrong answer).
MergeFixture read_merge_fixture(const std::string& path);

}  // namespace attncheck
