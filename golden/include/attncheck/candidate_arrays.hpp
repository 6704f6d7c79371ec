// A candidate's outputs from arrays already read (an .npz's members: out [, lse, weights, scores, present_key,
// present_value]), checked like read_candidate checks a file's; `path` names their source in messages.
#pragma once

#include <map>
#include <string>

#include "attncheck/problem.hpp"
#include "attncheck/user_arrays.hpp"

namespace attncheck {

Outputs candidate_from_arrays(std::map<std::string, UserArray> members, const std::string& path, const Problem& p);

}  // namespace attncheck
