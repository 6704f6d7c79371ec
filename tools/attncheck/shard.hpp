// Which part of a long run this process does: `--shard I/N` (0-based), or `--shard auto`, which reads the index
// and count the batch scheduler already gives each task (docs/sharding.md): ATTNCHECK_SHARD=I/N, a Slurm job array,
// a GitLab parallel job, a Kubernetes Indexed Job (with ATTNCHECK_SHARD_COUNT) or any CI matrix that sets
// ATTNCHECK_SHARD. Case k of a sorted list belongs to shard k mod N.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace attncheck::cli {

struct Shard {
  int64_t index = 0, count = 1;
  std::string source;  // where it came from, for the run's first line: "--shard", "SLURM_ARRAY_TASK_ID", ...
};

// "I/N" or "auto"; anything else, or auto with no scheduler's variables set, is std::invalid_argument naming the
// option, the value and (for auto) every variable looked for.
Shard parse_shard(const std::string& value, const std::function<const char*(const char*)>& getenv);

}  // namespace attncheck::cli
