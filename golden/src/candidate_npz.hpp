// A candidate's outputs read from an .npz (read_candidate dispatches here on the extension).
#pragma once

#include <cstdint>
#include <string>

#include "attncheck/problem.hpp"

namespace attncheck::fixture_detail {
Outputs read_candidate_npz(const std::string& path, const Problem& p, uint64_t max_bytes);
}
