// `attncheck compare-module`: a module's outputs (y [B, Lq, d_out], weights when the fixture has them, and the
// gradients dx, dwq, ... when given next to y) from an .npz, in any float dtype (bf16: uint16 bits), judged against
// a module fixture, each failure diagnosed with the module fault tags (harness/module).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "case_result.hpp"
#include "compare.hpp"

namespace attncheck::verify {

// Each judged row as it is judged, with its diagnosis line ("diagnosis: TAG ...") when it fails, else "".
using ModuleRowSink = std::function<void(const CaseResult& row, const std::string& diagnosis)>;

struct ModuleCompared {
  std::vector<CaseResult> rows;  // the forward row, then the gradients' row when gradients are given
  bool pass = false;
};

// Bad input (a missing or misshapen array, gradients without the fixture's dy) is std::invalid_argument naming the
// file and the array; it can come after the forward row was handed to `on_row`.
ModuleCompared compare_module(const std::string& expected, const std::string& actual, const NoteSink& note,
                              const ModuleRowSink& on_row);

}  // namespace attncheck::verify
