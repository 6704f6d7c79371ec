// What `attncheck property` does: every chosen property against every chosen implementation under RapidCheck, one
// line and one report row per (implementation, property), a shrunk failure written as a regression fixture; the
// JSON report (docs/property.md#report), its merge over shards, and the exit rule.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attncheck/impl.hpp"
#include "properties.hpp"

namespace attncheck::prop {

struct SuiteRunOptions {
  int cases = 80;              // generated cases per property
  uint64_t seed = 20261122;    // RapidCheck's seed
  bool write_fixtures = true;  // shrunk failures as fixtures (under ATTNCHECK_REGRESSIONS_DIR)
  std::string regressions;     // that directory, named in the replay hint
  // Unit k = implementation i, property p at k = i * properties + p: which to run (a shard; empty: all). An
  // unavailable implementation's one row belongs to its first pair's unit.
  std::function<bool(size_t)> runs_unit;
  std::function<void(const std::string&)> on_step;  // before each pair (progress, Ctrl-C)
  std::function<void()> before_line;                // before each printed line (erase the progress bar)
};

struct SuiteRun {
  nlohmann::json rows = nlohmann::json::array();  // report rows, each with its "unit" when sharded
  int failed = 0, problems = 0;                   // failed properties; unavailable or unchecked implementations
};

// Prints one line per pair on stdout as it goes.
SuiteRun run_suite(const std::vector<ImplPtr>& impls, const std::vector<const Property*>& props,
                   const SuiteRunOptions& o);

// {"pass": n, "fail": n, "unsupported": n, "unavailable": n} over report rows.
nlohmann::json property_summary(const nlohmann::json& rows);
// The JSON report of a run's rows.
nlohmann::json property_report(const nlohmann::json& rows, uint64_t seed, int cases);
// The exit rule over a whole run's rows: 1 for a failed property, an unavailable implementation, or one for which
// no generated case of any property was supported; else 0.
int property_exit(const nlohmann::json& rows);

}  // namespace attncheck::prop
