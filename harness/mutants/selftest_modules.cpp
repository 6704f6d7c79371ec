// The module mutants' rows of a selftest (selftest_modules.hpp).
#include "selftest_modules.hpp"

#include "attncheck/module_suite.hpp"

namespace attncheck::mutants {

std::vector<module_check::SelftestRow> module_selftest_rows(const SelftestOptions& o,
                                                            const std::function<bool(size_t)>& runs_row) {
  if (o.candidate || !o.properties.empty()) return {};
  return module_check::selftest(module_suite(), runs_row);
}

}  // namespace attncheck::mutants
