// Durable, all-or-nothing file writes for everything attncheck writes (fixtures, candidates, reports, PNGs):
// a crash, a full disk or a power cut leaves either the old file or the new one, never half of either.
#pragma once

#include <string>
#include <string_view>

namespace attncheck {

// Writes `bytes` to `path`: to a temporary in the same directory (".NAME.attncheck-PID.tmp"; rename is atomic
// only within one file system), fsynced, renamed over `path`, then the directory fsynced so the rename itself
// survives a power cut. Before that, temporaries in the directory left by processes that no longer exist are
// removed. On failure the temporary is removed and std::runtime_error names `path`, the step and the OS error.
void write_file_durably(const std::string& path, std::string_view bytes);

// Removes ".*.attncheck-PID.tmp" files in `dir` whose PID is not a live process; returns how many it removed.
int remove_stale_temporaries(const std::string& dir);

}  // namespace attncheck
