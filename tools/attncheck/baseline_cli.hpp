// The options and output of a baseline comparison, shared by `verify --baseline` and `compare-reports`
// (harness/baseline does the statistics; docs/regression.md describes both).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "baseline.hpp"

namespace attncheck::cli {

struct BaselineOptions {
  std::vector<std::string> max_growth;  // "X" for every dtype, "DTYPE=X" for one
  double max_bias_shift = 0.25;
  int min_cases = 6;
  double confidence = 0.99;
  std::string summary, junit;  // Markdown and JUnit XML files
};

void add_baseline_options(CLI::App& sub, BaselineOptions& o);
// Throws std::invalid_argument naming the option and the value.
baseline::Thresholds thresholds(const BaselineOptions& o);
// Checks that the output files can be written before any work (the directory exists).
void check_baseline_outputs(const BaselineOptions& o);
// Prints the comparison, writes the Markdown summary (to --summary and, when set, appended to
// $GITHUB_STEP_SUMMARY) and the JUnit file; returns the number of regressions.
int report_comparison(const baseline::Comparison& c, const BaselineOptions& o, const std::string& title);

}  // namespace attncheck::cli
