// The reports of result rows: JSON (docs/regression.md#report-schema) and JUnit XML, written so that they land
// complete or not at all. The CLI prints the same rows as a table (tools/attncheck/report.hpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "attncheck/tolerance.hpp"
#include "case_result.hpp"

namespace attncheck::verify {

// The report schema written by write_report (docs/regression.md#report-schema); readers accept every older one.
inline constexpr int kReportSchemaVersion = 2;

// Rows per status (every status present, most of them 0).
std::map<Status, int> status_counts(const std::vector<CaseResult>& rs);

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
// Throws std::invalid_argument when the report path has an unknown extension or cannot be written (checked before
// any work).
void check_report_path(const std::string& path);

}  // namespace attncheck::verify
