// The exit code of a run's result rows (README "Exit codes"), the same for verify, compare, import and a merge of
// verify's shards.
#pragma once

#include <string>
#include <vector>

#include "case_result.hpp"

namespace attncheck::verify {

// CI honesty: what besides failures makes the exit code 1. verify sets both unless --allow-unavailable.
struct ExitRules {
  std::vector<std::string> must_be_available;  // implementations named on the command line
  bool require_compared = false;               // at least one row must be judged (pass or fail)
};
// 2 when any row is input-error (an input file could not be read: the run is incomplete, whatever else failed);
// else 0 when nothing failed (unsupported is never a failure; unavailable only under the rules), else 1. When a
// rule decides, the reason is printed to stderr.
int exit_code(const std::vector<CaseResult>& rs, const ExitRules& rules = {});

}  // namespace attncheck::verify
