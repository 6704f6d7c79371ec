// The CLI's side of merges (docs/states.md): generate for a merge suite spec, power for merge fixtures.
#pragma once

#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "attncheck/state_fixture.hpp"
#include "report.hpp"

namespace attncheck::cli {

// `attncheck generate --spec SUITE` when SUITE is a merge suite: byte-identical, --update to change a file.
int generate_merge_suite(const std::string& spec, const std::string& out, bool update);

}  // namespace attncheck::cli

namespace attncheck::cli {
// `attncheck power --merge DIR`: every merge variant (harness/power/merge_power.hpp) on every merge fixture under
// DIR; prints the table and returns 0 when every fault is caught with its tag and no correct variant fails, 2 when
// a file could not be read (listed after the table; every other fixture counts).
int merge_power_table(const std::string& dir);
}  // namespace attncheck::cli
