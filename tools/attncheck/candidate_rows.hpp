// The table of a candidate's rows, as `compare` and `import --judge` print them (the judging:
// harness/verify/compare.hpp).
#pragma once

#include <string>
#include <vector>

#include "report.hpp"

namespace attncheck::cli {

// The table: each row, its tensors and its diagnosis lines (diagnoses[i] belongs to rows[i]), then the summary.
void print_rows(const std::vector<CaseResult>& rows, const std::vector<std::vector<std::string>>& diagnoses);

}  // namespace attncheck::cli
