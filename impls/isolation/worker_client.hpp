// An implementation that runs in a child process speaking the worker protocol (docs/worker-protocol.md): the
// plugin host (`attncheck worker-host --plugin LIB.so`), a Python worker or any `--worker "CMD ARGS"`. A crash,
// hang, exit, stray write or input modification of the child becomes a RunFailure for that case, and the child is
// started again for the next one.
#pragma once

#include <string>
#include <vector>

#include "attncheck/impl.hpp"

namespace attncheck {

struct WorkerOptions {
  std::vector<std::string> argv;  // the worker command (argv[0] is looked up in PATH)
  std::string label;              // how messages name it, e.g. "plugin libx.so" (default: argv joined)
  double timeout_s = 0;           // per case; 0 = default_timeout(problem)
  int64_t memory_limit_mb = 0;    // RLIMIT_AS of the child; 0 = none
  double startup_timeout_s = 60;  // for the handshake
};

// 10 s plus 1 s per GFLOP (2·B·Hq·Lq·Lk·(Dqk+Dv) flops): generous for any sane implementation, short for a hang.
double default_timeout(const Problem& p);

// Starts the worker and shakes hands. Throws PluginError when the worker cannot start, dies during the handshake
// or sends a malformed hello (the message names the field).
ImplPtr start_worker(const WorkerOptions& o);

// The worker command that runs a plugin library isolated: `<attncheck> worker-host --plugin PATH`, where
// <attncheck> is the running attncheck binary (or ATTNCHECK_WORKER_HOST when set).
std::vector<std::string> plugin_host_argv(const std::string& attncheck_exe, const std::string& plugin_path);

}  // namespace attncheck
