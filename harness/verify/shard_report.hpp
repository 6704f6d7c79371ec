// verify's report as a run writes it, sharded or not, and the merge of its shards' reports (`attncheck merge`): the
// merged report and exit code are the unsharded run's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cases.hpp"
#include "exit_rules.hpp"
#include "judge.hpp"
#include "sharding.hpp"

namespace attncheck::verify {

// Writes the run's report to `path` (.json or .xml). A shard's JSON report also gives each row its unit (its
// fixture's place in the whole run's sorted list) and, in its shard mark, what `merge` needs to finish the whole
// run's report: the fixtures read without checksums and the exit rules.
void write_run_report(const std::string& path, const Judged& judged, const Cases& cases, double tol_scale,
                      const std::optional<Shard>& shard, const ExitRules& rules);

// `merge` of verify's shards: the summary, the notes and the exit code of the whole run, from every shard's rows;
// `merged` holds the rows in unit order. An unknown status is std::invalid_argument.
int merge_shards(nlohmann::json& merged, const std::vector<nlohmann::json>& shards);

}  // namespace attncheck::verify
