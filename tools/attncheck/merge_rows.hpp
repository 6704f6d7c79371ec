// The CLI's side of merges (docs/states.md): verify's rows for merge fixtures, and generate for a merge suite spec.
#pragma once

#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "attncheck/state_fixture.hpp"
#include "report.hpp"

namespace attncheck::cli {

// One verify row: `impl`'s merge of the fixture's states judged by the derived bound (docs/states.md). With
// `diagnosis`, a failure's likely cause is appended (merge diagnosis tags) and its lines written there.
CaseResult merge_row(const Impl& impl, const Support& available, const MergeFixture& f, const std::string& file,
                     std::vector<std::string>* diagnosis);
// `attncheck generate --spec SUITE` when SUITE is a merge suite: byte-identical, --update to change a file.
int generate_merge_suite(const std::string& spec, const std::string& out, bool update);

}  // namespace attncheck::cli

namespace attncheck::cli {
// `attncheck power --merge DIR`: every merge variant (harness/power/merge_power.hpp) on every merge fixture under
// DIR; prints the table and returns 0 when every fault is caught with its tag and no correct variant fails, 2 when
// a file could not be read (listed after the table; every other fixture counts).
int merge_power_table(const std::string& dir);
}  // namespace attncheck::cli
