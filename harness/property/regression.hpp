// Failing property cases become regression fixtures (golden/regressions/ by default, ATTNCHECK_REGRESSIONS_DIR to
// change it) that `attncheck verify --fixtures` replays. Returns the path written, or "" when none was written.
#pragma once

#include <cstdint>
#include <string>

#include "case.hpp"

namespace attncheck::prop {

// Where fixtures go: ATTNCHECK_REGRESSIONS_DIR, else <source>/golden/regressions.
std::string regressions_dir();
std::string write_regression(const Case& c, const std::string& impl, const std::string& property,
                             const std::string& message, uint64_t seed);

}  // namespace attncheck::prop
