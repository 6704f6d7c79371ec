// Failing property cases become regression fixtures (./attncheck-regressions/ by default, ATTNCHECK_REGRESSIONS_DIR
// or `attncheck property --regressions DIR` to change it) that `attncheck verify --fixtures` replays. Never into the
// source tree unless asked (ATTNCHECK_REGRESSIONS_DIR=golden/regressions): a later run would pick them up. Returns the
// path written, or "" when none was written.
#pragma once

#include <cstdint>
#include <string>

#include "case.hpp"

namespace attncheck::prop {

// Where fixtures go: ATTNCHECK_REGRESSIONS_DIR, else attncheck-regressions in the working directory.
std::string regressions_dir();
std::string write_regression(const Case& c, const std::string& impl, const std::string& property,
                             const std::string& message, uint64_t seed);

}  // namespace attncheck::prop
