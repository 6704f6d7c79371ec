// The status of a result row (one per case and implementation) and its one spelling, shared by the table, the JSON
// and JUnit reports and `merge` (docs/regression.md#report-schema).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attncheck::verify {

// Judged: pass, fail. Not run: unsupported, unavailable (the implementation cannot run on this machine). Run but
// not judged: finite_required (the case stores non-finite K/V values and the implementation declares
// masked_inputs: finite-required; docs/isolation.md#masked-inputs). Failures of the run itself
// (attncheck/run_failure.hpp): error, crashed, timeout, exited, modified_input, out_of_bounds. An input file that
// could not be read: input_error (one row per file, impl "-", the file's name as the case, the reason as message).
enum class Status {
  pass,
  fail,
  unsupported,
  unavailable,
  finite_required,
  error,
  crashed,
  timeout,
  exited,
  modified_input,
  out_of_bounds,
  input_error,
};

// Every status, in report order.
const std::vector<Status>& all_statuses();
// The spelling in reports: "pass", "finite-required", "input-error", ...
const std::string& to_string(Status s);
// The status spelled `s`, nullopt for any other text.
std::optional<Status> status_from_string(std::string_view s);
// fail or a failure of the run: everything but pass, unsupported, unavailable and finite_required.
bool is_failure(Status s);

}  // namespace attncheck::verify
