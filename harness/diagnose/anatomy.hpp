// Error anatomy: where a failure lives (batches, heads, rows, head-dim columns, keys), how it relates to the
// diagonal, window edges, tiles, fully masked rows, padded keys and GQA groups, how it grows (with visible keys,
// |logit|, distance from the first tile), and whether out, lse and weights agree. One finding per line.
#pragma once

#include <string>
#include <vector>

#include "subject.hpp"

namespace attncheck::diagnose {

std::vector<std::string> anatomy(const Subject& s);

}  // namespace attncheck::diagnose
