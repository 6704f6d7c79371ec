// `attncheck merge`: the N JSON reports of a sharded run (`--shard I/N` of verify, property, power, selftest) joined
// into the report the unsharded run writes, with its exit code: the rows are put back in unit order, the shard marks
// dropped, and the verb recomputes what it derives from the rows (its Merger). Every shard 0..N-1 of one run must be
// there exactly once; anything else is std::invalid_argument naming the file and the field.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace attncheck::verify {

// How `merge` finishes a verb's report: `rows` are the arrays whose elements carry units (concatenated over the
// shards and put back in unit order); `finish` recomputes everything derived from them (summaries, counts) in the
// merged report and returns the exit code the unsharded run would have had; it also sees the shards' reports.
struct Merger {
  std::string verb;
  std::vector<std::string> settings;  // fields every shard must agree on (seed, cases, ...)
  std::vector<std::string> rows;
  std::function<int(nlohmann::json& merged, const std::vector<nlohmann::json>& shards)> finish;
};

struct MergedReport {
  std::string verb;
  size_t shards = 0;
  std::string text;  // the merged report, indented as the shards were, with a final newline
  int exit_code = 0;
};

// Reads the shards' reports `files` and merges them with the Merger of their verb.
MergedReport merge_reports(const std::vector<std::string>& files, const std::vector<Merger>& mergers);

}  // namespace attncheck::verify
