// Module fixtures inside `attncheck verify`: one row per implementation, judged through its module
// entry; an implementation without one reports the fixture as unsupported. With the backward pass, a fixture with
// gradients also gets one "<impl>/backward" row per implementation.
#pragma once

#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "case_result.hpp"

namespace attncheck::verify {

struct ModuleRow {
  CaseResult row;
  std::vector<std::string> lines;  // printed under the row (the diagnosis)
};

// The case name of a module fixture file ("" when it cannot be read: module_rows then gives its input-error row).
std::string module_case_name(const std::string& file);
// Whether a readable module fixture carries dy and the reference gradients.
bool module_fixture_has_gradients(const std::string& file);
std::vector<ModuleRow> module_rows(const std::string& file, const std::vector<ImplPtr>& impls,
                                   const std::vector<Support>& avail, bool diagnose, double tol_scale,
                                   bool forward = true, bool backward = false);

}  // namespace attncheck::verify
