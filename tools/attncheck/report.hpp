// What verify and compare share: one result row per (fixture, implementation), the terminal table, the JSON and
// JUnit XML reports, the exit code, and a progress bar that only draws on a terminal.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "attncheck/tolerance.hpp"
#include "case_result.hpp"

namespace attncheck::cli {

// The rows are the judging library's (harness/verify/case_result.hpp).
using verify::CaseResult;
using verify::input_error;
using verify::judged_result;
using verify::Status;
using verify::unchecksummed_note;
using verify::unjudged;

// The report schema written by write_report (docs/regression.md#report-schema); readers accept every older one.
inline constexpr int kReportSchemaVersion = 2;

// After the summary: every input-error row again, one line each ("FILE: reason"); nothing when there is none.
void print_unreadable(const std::vector<CaseResult>& rs);

// Prints the column header, then one row per result (status, impl, case, errors, worst element) to stdout.
void print_header();
void print_row(const CaseResult& r);
// "pass 12  fail 0  unsupported 3  error 0" plus the failing rows again when there are many.
void print_summary(const std::vector<CaseResult>& rs);
// .json -> {"schema_version":2,"cases":[...],"summary":{...},"tol_scale":X}; .xml -> JUnit XML. Anything else: std::invalid_argument.
// tol_scale: the user's explicit multiplier of every bound (`--tol-scale`), recorded so it is never silent.
// notes: the run's notes printed under the table (e.g. unchecksummed_note), also in the report: JSON "notes" (only
// when there is one), JUnit a <property name="attncheck.note"> in every testsuite.
void write_report(const std::string& path, const std::vector<CaseResult>& rs, double tol_scale = 1.0,
                  const std::vector<std::string>& notes = {});
// The JSON report's text (what write_report writes to a .json path). `case_per_line`: each case compact on its own
// line, as stored baselines are kept (a regenerated baseline then reads as a per-case diff in review).
std::string report_json(const std::vector<CaseResult>& rs, double tol_scale = 1.0, bool case_per_line = false,
                        const std::vector<std::string>& notes = {});
// A tensor's accuracy profile as the reports write it (docs/regression.md#report-schema).
nlohmann::json accuracy_json(const Accuracy& a);
// Writes a report's text so that it lands complete or not at all; a failure is an input error naming --report.
void write_report_file(const std::string& path, const std::string& text);
// Throws std::invalid_argument when the report path has an unknown extension (checked before any work).
void check_report_path(const std::string& path);
// CI honesty: what besides failures makes the exit code 1. verify sets both unless --allow-unavailable.
struct ExitRules {
  std::vector<std::string> must_be_available;  // implementations named on the command line
  bool require_compared = false;               // at least one row must be judged (pass or fail)
};
// 2 when any row is input-error (an input file could not be read: the run is incomplete, whatever else failed);
// else 0 when nothing failed (unsupported is never a failure; unavailable only under the rules), else 1. When a
// rule decides, the reason is printed to stderr.
int exit_code(const std::vector<CaseResult>& rs, const ExitRules& rules = {});

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
