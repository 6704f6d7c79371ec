// A candidate's forward outputs judged against a fixture: the row `compare` gives for a file, and `import --judge`
// for tensors that carry their own outputs. One place, so both routes judge and print alike.
#pragma once

#include <string>
#include <vector>

#include "attncheck/fixture.hpp"
#include "report.hpp"

namespace attncheck::cli {

// Judges what the candidate provides (lse when it has lse; weights when both it and the fixture have them) under the
// fixture's tolerance model, or under the declared precision `contract` when one is given; prints a note for each
// output not compared, naming `source`. `judged` receives the problem and model it was judged under.
struct Judged {
  Problem problem;
  ToleranceModel model;
};
CaseResult judge_forward(const Fixture& f, const std::string& file, const std::string& source, const std::string& impl,
                         const Outputs& cand, const std::string& contract, Judged& judged);

// The table: each row, its tensors and its diagnosis lines (diagnoses[i] belongs to rows[i]), then the summary.
void print_rows(const std::vector<CaseResult>& rows, const std::vector<std::vector<std::string>>& diagnoses);

}  // namespace attncheck::cli
