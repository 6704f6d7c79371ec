// One result row per (case, implementation), and the rows every judging route builds the same way: a verdict's
// pass/fail row, an unreadable file's input-error row, a run failure's row, a case outside a finite-required
// contract. verify, compare and import print and report them alike (reports.hpp, tools/attncheck/report.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/tolerance.hpp"
#include "status.hpp"

namespace attncheck::verify {

struct CaseResult {
  std::string fixture;  // case name (pasteable into --filter)
  std::string file;     // fixture path
  std::string impl;
  Status status = Status::error;
  std::string message;  // reason (unsupported/error) or the worst element's description
  bool judged = false;  // a verdict exists (pass or fail)
  Verdict verdict;
  std::string diagnosis_json;  // with --diagnose on a failure: harness/diagnose's JSON object, else ""
  std::string dtype;                  // the problem's dtype ("fp16"), for grouping in baseline comparisons
  std::vector<std::string> features;  // the optional features the problem uses (features.hpp names)
};

// A row not judged yet: status error until a route gives it its outcome.
CaseResult unjudged(std::string fixture, std::string file, std::string impl);
// Sets r.dtype and r.features from the problem the row was run on.
void describe_problem(CaseResult& r, const Problem& p);
// pass/fail row from a verdict.
CaseResult judged_result(std::string fixture, std::string file, std::string impl, Verdict v);
// For an implementation that declares masked_inputs: finite-required: a judged row of a case whose inputs hold
// non-finite values (nonfinite_inputs names them) is not judged, status finite-required, its run's verdict kept in
// the message. Other rows unchanged.
void apply_masked_inputs_contract(const std::string& nonfinite_inputs, CaseResult& r);
// Call only inside a catch handler: records the exception being handled in r (a RunFailure's outcome, or error
// for any other std::exception, with its message). Anything that is not a std::exception is rethrown.
void record_exception(CaseResult& r);
// The input-error row of a file that could not be read.
CaseResult input_error(const std::string& file, const std::string& reason);
// The one-line note for n fixtures read without checksums (golden/SCHEMA.md "Checksums").
std::string unchecksummed_note(int64_t n);

}  // namespace attncheck::verify
