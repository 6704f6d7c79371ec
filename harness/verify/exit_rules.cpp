#include "exit_rules.hpp"

#include <algorithm>
#include <cstdio>

#include "reports.hpp"

namespace attncheck::verify {

int exit_code(const std::vector<CaseResult>& rs, const ExitRules& rules) {
  const auto unreadable =
      std::count_if(rs.begin(), rs.end(), [](const CaseResult& r) { return r.status == Status::input_error; });
  if (unreadable > 0) {  // the verdict is incomplete: 2 before 1 (README "Exit codes")
    std::fprintf(stderr,
                 "attncheck: exit 2: %ld input file(s) could not be read (rows input-error, listed above); "
                 "every other case was judged\n",
                 static_cast<long>(unreadable));
    return 2;
  }
  for (const auto& r : rs)
    if (is_failure(r.status)) return 1;
  for (const auto& name : rules.must_be_available)
    for (const auto& r : rs)
      if (r.impl == name && r.status == Status::unavailable) {
        std::fprintf(stderr, "attncheck: exit 1: implementation '%s' is %s (pass --allow-unavailable to accept)\n",
                     name.c_str(), r.message.c_str());
        return 1;
      }
  if (rules.require_compared && std::none_of(rs.begin(), rs.end(), [](const CaseResult& r) { return r.judged; })) {
    const auto n = status_counts(rs);
    std::fprintf(stderr,
                 "attncheck: exit 1: no case was compared (%d unsupported, %d unavailable); pass "
                 "--allow-unavailable to accept\n",
                 n.at(Status::unsupported), n.at(Status::unavailable));
    return 1;
  }
  return 0;
}

}  // namespace attncheck::verify
