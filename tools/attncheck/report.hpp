// What verify and compare share: one result row per (fixture, implementation), the terminal table, the reports and
// the exit code (the judging library's, harness/verify/reports.hpp, exit_rules.hpp), and a progress bar that only
// draws on a terminal.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "case_result.hpp"
#include "exit_rules.hpp"
#include "reports.hpp"

namespace attncheck::cli {

// The rows and their reports are the judging library's (harness/verify/case_result.hpp, reports.hpp).
using verify::accuracy_json;
using verify::CaseResult;
using verify::check_report_path;
using verify::exit_code;
using verify::ExitRules;
using verify::input_error;
using verify::judged_result;
using verify::kReportSchemaVersion;
using verify::report_json;
using verify::Status;
using verify::status_counts;
using verify::unchecksummed_note;
using verify::unjudged;
using verify::write_report;
using verify::write_report_file;

// After the summary: every input-error row again, one line each ("FILE: reason"); nothing when there is none.
void print_unreadable(const std::vector<CaseResult>& rs);

// Prints the column header, then one row per result (status, impl, case, errors, worst element) to stdout.
void print_header();
void print_row(const CaseResult& r);
// "pass 12  fail 0  unsupported 3  error 0" plus the failing rows again when there are many.
void print_summary(const std::vector<CaseResult>& rs);
// A one-line progress bar on stderr, drawn only when stderr is a terminal (never in CI logs or pipes).
class Progress {
 public:
  explicit Progress(size_t total);
  ~Progress();
  void step(const std::string& label);  // before working on an item
  void clear();                         // erase the bar (before printing a row)

 private:
  size_t total_, done_ = 0;
  bool enabled_;
};

}  // namespace attncheck::cli
