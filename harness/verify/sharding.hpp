// Which part of a long run a process does: unit k of a verb's ordered list of work belongs to shard k mod N. The
// CLI reads it from `--shard I/N` or a batch scheduler's variables (tools/attncheck/shard.hpp, docs/sharding.md). A
// sharded report carries a "shard" object and a "unit" on each row, which `attncheck merge` puts back in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace attncheck::verify {

struct Shard {
  int64_t index = 0, count = 1;
  std::string source;  // where it came from, for the run's first line: "--shard", "SLURM_ARRAY_TASK_ID", ...
  bool owns(size_t unit) const { return static_cast<int64_t>(unit % static_cast<size_t>(count)) == index; }
};

// True when this process runs unit k (always, unsharded).
inline bool runs_unit(const std::optional<Shard>& s, size_t unit) { return !s || s->owns(unit); }
// A report row of unit k: tagged with its unit when sharded, so that `merge` restores the unsharded order.
nlohmann::json unit_row(nlohmann::json row, const std::optional<Shard>& s, size_t unit);
// Marks a sharded report: {"shard": {"verb", "index", "count", "indent"}}; `indent` is the JSON indentation the
// verb prints with, which the merged report keeps.
void stamp_shard(nlohmann::json& report, const std::optional<Shard>& s, const std::string& verb, int indent);

}  // namespace attncheck::verify
