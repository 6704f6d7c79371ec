// Validation of the diagnoser: every selftest mutant is run on the golden fixtures it fails, and every power fault on
// grid problems; each failure is diagnosed (with probes re-running the faulty kernel) and the top tag is compared
// with the injected cause.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace attncheck::diagnose {

struct ValidationRow {
  std::string mutant, injected;         // mutant (or power fault) name and the tag of the bug it injects
  int cases = 0, hits = 0;              // diagnosed failures, and those whose top tag is the injected one
  std::map<std::string, int> top_tags;  // top tag -> count
  std::vector<int> reruns;              // per diagnosed failure
  std::vector<std::string> misses;      // "case: diagnosis lines" for failures whose top tag is another one
  std::string majority() const;         // most frequent top tag ("-" without cases)
};

// The tag each selftest mutant injects (harness/mutants/mutants.cpp).
const std::map<std::string, std::string>& injected_tags();

// Up to `per_mutant` failing fixtures per mutant (in file-name order) from `fixtures_dir`. With `on_modifications`,
// each mutant declares the modification library (mutants::declaring_library) and only the fixtures through a
// modification (score, mask or position: RoPE, QK-norm) count: its bug diagnosed where the modifications change
// the scores, the visibility or the positions the diagnoser's models read.
std::vector<ValidationRow> validate_on_mutants(const std::string& fixtures_dir, int per_mutant, int max_reruns,
                                               bool on_modifications = false);

// The tag each fault of the detection-power engine injects (harness/power).
const std::map<std::string, std::string>& power_injected_tags();
// Up to `per_fault` detected failures per power fault on grid problems with Lk 1024 and 8 query rows.
std::vector<ValidationRow> validate_on_power(int per_fault, int max_reruns);

// Markdown table plus the hit rate and the median number of re-runs.
std::string validation_table(const std::vector<ValidationRow>& rows);

}  // namespace attncheck::diagnose
