// What `attncheck selftest` reports: the catalogue's rows (and the module mutants' rows) as a table or JSON, the
// backward catalogue's likewise, the exit rule, and the merge of sharded reports, which recounts from the rows.
#pragma once

#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backward_mutants.hpp"
#include "module_check.hpp"
#include "selftest.hpp"

namespace attncheck::mutants {

// Every mutant killed, no false alarm, and every module mutant caught and tagged.
bool selftest_ok(const SelftestReport& r, const std::vector<module_check::SelftestRow>& mod);
// The JSON report (`selftest --json`); `verbose` adds each failure's message. `units`: each row carries its unit
// (the catalogue's entries, then the module rows), for a sharded run's report.
nlohmann::json selftest_json(const SelftestReport& r, const SelftestOptions& o,
                             const std::vector<module_check::SelftestRow>& mod, bool verbose, bool units);
// The table on stdout: one line per entry, the totals, the module mutants and the candidate's scope and contracts.
void print_selftest(const SelftestReport& r, const SelftestOptions& o,
                    const std::vector<module_check::SelftestRow>& mod, bool verbose);

// The backward catalogue (docs/backward.md "Backward mutants"): every mutant killed and no false alarm.
bool backward_selftest_ok(const std::vector<BackwardSelftestResult>& rs);
nlohmann::json backward_selftest_json(const std::vector<BackwardSelftestResult>& rs, bool units);
void print_backward_selftest(const std::vector<BackwardSelftestResult>& rs);

// A merge of shards' reports: the counts recomputed from the rows' verdicts; returns the unsharded run's exit code.
int merge_selftest(nlohmann::json& j);

}  // namespace attncheck::mutants
