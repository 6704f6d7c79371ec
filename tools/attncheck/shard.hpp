// Which part of a long run this process does: `--shard I/N` (0-based), or `--shard auto`, which reads the index
// and count the batch scheduler already gives each task (docs/sharding.md): ATTNCHECK_SHARD=I/N, a Slurm job array,
// a GitLab parallel job, a Kubernetes Indexed Job (with ATTNCHECK_SHARD_COUNT) or any CI matrix that sets
// ATTNCHECK_SHARD. Unit k of a verb's ordered list of work belongs to shard k mod N.
//
// Every long verb takes the option through add_shard_option and resolve_shard; a sharded JSON report carries a
// "shard" object and a "unit" on each row (stamp_shard, unit_row), and `attncheck merge` puts N such reports back
// into the report of the unsharded run with the verb's own exit rule (register_merge).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "merge_reports.hpp"
#include "sharding.hpp"

namespace attncheck::cli {

using verify::Shard;

// "I/N" or "auto"; anything else, or auto with no scheduler's variables set, is std::invalid_argument naming the
// option, the value and (for auto) every variable looked for.
Shard parse_shard(const std::string& value, const std::function<const char*(const char*)>& getenv);

// The --shard option of a long verb, described once.
void add_shard_option(CLI::App& sub, std::optional<std::string>& value);
// nullopt when --shard was not given; else the shard (from the process environment for auto), announced on stdout
// as "shard I/N (SOURCE): M WHAT" once the verb knows how many units it has (on stderr where stdout is the report).
std::optional<Shard> resolve_shard(const std::optional<std::string>& value);
void announce_shard(const Shard& s, size_t units, const char* what, std::FILE* to = stdout);

// The report marks of a shard are the judging library's (harness/verify/sharding.hpp).
using verify::runs_unit;
using verify::stamp_shard;
using verify::unit_row;

// How `merge` finishes each verb's report (harness/verify/merge_reports.hpp); each verb registers its own.
using verify::Merger;
std::vector<Merger>& mergers();
struct RegisterMerge {
  explicit RegisterMerge(Merger m) { mergers().push_back(std::move(m)); }
};

}  // namespace attncheck::cli
