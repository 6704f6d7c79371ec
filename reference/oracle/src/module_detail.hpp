// The module reference's private helpers, shared by its forward (module_reference.cpp) and backward
// (module_backward.cpp).
#pragma once

#include <cstdint>

#include "attncheck/module_trace.hpp"

namespace attncheck::inline oracle::module_detail {

inline size_t at(int64_t i) { return static_cast<size_t>(i); }

// The row of a packed weight that holds feature d of head h of q (which = 0), k (1) or v (2).
int64_t packed_row(const ModuleProblem& m, Packing pk, int which, int64_t h, int64_t d);

}  // namespace attncheck::inline oracle::module_detail
