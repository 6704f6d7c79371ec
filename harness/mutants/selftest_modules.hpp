// The module mutants' rows of `attncheck selftest` (docs/module.md), beside the catalogue's entries.
#pragma once

#include <functional>
#include <vector>

#include "module_check.hpp"
#include "selftest.hpp"

namespace attncheck::mutants {

// Every module mutant on the module suite, built in memory. They are the cpu entry's, so a run with a candidate has
// none, and neither has one that asks about chosen properties (--property: the property suite alone).
// runs_row(k): whether this run owns module row k (a shard counts the catalogue's entries first).
std::vector<module_check::SelftestRow> module_selftest_rows(const SelftestOptions& o,
                                                            const std::function<bool(size_t)>& runs_row);

}  // namespace attncheck::mutants
