// Which part of a long run a process does: unit k of a verb's ordered list of work belongs to shard k mod N. The
// CLI reads it from `--shard I/N` or a batch scheduler's variables (tools/attncheck/shard.hpp, docs/sharding.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace attncheck::verify {

struct Shard {
  int64_t index = 0, count = 1;
  std::string source;  // where it came from, for the run's first line: "--shard", "SLURM_ARRAY_TASK_ID", ...
  bool owns(size_t unit) const { return static_cast<int64_t>(unit % static_cast<size_t>(count)) == index; }
};

}  // namespace attncheck::verify
