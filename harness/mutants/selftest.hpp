// `attncheck selftest`: runs every property on a fixed, seeded list of generated cases against every mutant and
// correct variant of the catalogue. A mutant is killed when some property fails on some case; a correct variant
// that fails anything is a false alarm. Deterministic: the cases depend only on the seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attncheck/impl.hpp"

namespace attncheck::mutants {

struct SelftestOptions {
  int cases_per_property = 24;
  uint64_t seed = 20261122;
  int64_t budget = 40000;  // CaseSpec::cost per case
  // A candidate (plugin, worker, built-in): the cases are restricted to what it supports, every mutant must still
  // die on them, and the candidate itself runs as one more entry that must pass (a false alarm otherwise).
  ImplPtr candidate;
  // Which catalogue entries to run, by index (the candidate is the last); empty: all. A shard of the selftest.
  std::function<bool(size_t)> runs_entry;
  std::vector<std::string> properties;  // only these properties (names); empty: all
};

struct Kill {
  std::string property;
  std::string case_name;
  double ratio = 0;     // error / tolerance of the failing comparison (inf for NaN or a non-finite mismatch)
  std::string message;  // the property's failure message
};

struct EntryResult {
  std::string name, bug;
  size_t entry = 0;  // index in the catalogue (the candidate last)
  bool correct = false;
  bool out_of_scope = false;   // with a candidate: killed only on cases outside its capabilities
  std::vector<Kill> failures;  // one per property that failed (first failing case)
  double max_pass_ratio = 0;   // largest error / tolerance among passing checks
  int checks = 0, unsupported = 0;
};

struct SelftestReport {
  int mutants = 0, killed = 0, correct = 0, false_alarms = 0, out_of_scope = 0;
  double seconds = 0;
  size_t entries = 0;  // the catalogue's size (with the candidate), whether run or not
  std::vector<EntryResult> details;
};

SelftestReport run_selftest(const SelftestOptions& o = {});

}  // namespace attncheck::mutants
