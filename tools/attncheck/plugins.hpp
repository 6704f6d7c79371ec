// The shared `--plugin LIB.so` option (repeatable) and the isolation options: any subcommand that lists or runs
// implementations declares them and loads the implementations before it looks at the registry, so plugins and
// workers are treated like built-ins everywhere. Plugins run in a child process (docs/isolation.md).
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "attncheck/plugin_loader.hpp"
#include "worker_client.hpp"

namespace attncheck::cli {

struct Isolation {
  std::vector<std::string> workers;  // --worker "CMD ARGS"
  bool isolate = false;              // --isolate: built-ins in a child process too
  bool in_process = false;           // --in-process: plugins loaded into attncheck itself (no protection)
  double timeout_s = 0;              // --timeout S (0 = scaled by the problem's FLOPs)
  int64_t memory_limit_mb = 0;       // --memory-limit MB
};
inline Isolation& isolation() {
  static Isolation i;
  return i;
}

inline void add_plugin_option(CLI::App& sub, std::vector<std::string>& paths) {
  // One library per --plugin (no greedy "--plugin a.so b.so"), so it can never swallow a following argument.
  sub.add_option("--plugin", paths,
                 "Shared library implementing attncheck/plugin.h; registered as an implementation (repeatable)")
      ->allow_extra_args(false);
  Isolation& i = isolation();
  sub.add_option("--worker", i.workers,
                 "Command speaking docs/worker-protocol.md, e.g. \"python3 mine.py\" (repeatable)")
      ->allow_extra_args(false);
  sub.add_option("--timeout", i.timeout_s,
                 "Per-case timeout in seconds for isolated implementations "
                 "(default 10 s + 1 s per GFLOP)");
  sub.add_option("--memory-limit", i.memory_limit_mb, "Address-space limit (MB) of each isolated implementation");
  sub.add_flag("--isolate", i.isolate, "Run built-in implementations in a child process too");
  sub.add_flag("--in-process", i.in_process, "Load plugins into attncheck itself (faster, unprotected)");
}

inline std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find the attncheck binary (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

inline WorkerOptions worker_options(std::vector<std::string> argv, std::string label) {
  WorkerOptions o;
  o.argv = std::move(argv), o.label = std::move(label);
  o.timeout_s = isolation().timeout_s, o.memory_limit_mb = isolation().memory_limit_mb;
  return o;
}

// Throws PluginError (a bad library or worker) or std::invalid_argument (a duplicate name); main: exit 2.
inline void load_plugins(const std::vector<std::string>& paths) {
  for (const auto& path : paths)
    register_impl(isolation().in_process
                      ? load_plugin(path)
                      : start_worker(worker_options(plugin_host_argv(self_exe(), path), "plugin " + path)));
  for (const auto& cmd : isolation().workers)
    register_impl(start_worker(worker_options({"/bin/sh", "-c", "exec " + cmd}, "worker " + cmd)));
}

// The implementation a command judges as its candidate: the one named by --candidate, else the single plugin or
// worker given (several: the user must name one), else nullptr. Throws std::invalid_argument (exit 2).
inline ImplPtr brought_candidate(const std::string& named, const std::string& cmd) {
  if (!named.empty()) {
    ImplPtr c = find_impl(named);
    if (!c) throw std::invalid_argument("--candidate: unknown implementation '" + named + "'");
    return c;
  }
  std::vector<ImplPtr> brought;
  for (const auto& i : registry())
    if (i->description().find("[isolated: ") != std::string::npos ||
        i->description().find("[plugin ") != std::string::npos)
      brought.push_back(i);
  if (brought.size() > 1)
    throw std::invalid_argument(cmd + ": several plugins/workers given; name one with --candidate");
  return brought.empty() ? nullptr : brought[0];
}

// With --isolate, each built-in is replaced by the same implementation served by `attncheck worker-host --impl`.
inline std::vector<ImplPtr> maybe_isolate(std::vector<ImplPtr> impls) {
  if (!isolation().isolate) return impls;
  for (auto& impl : impls)
    if (impl->description().find("[isolated: ") == std::string::npos)
      impl =
          start_worker(worker_options({self_exe(), "worker-host", "--impl", impl->name()}, "isolated " + impl->name()));
  return impls;
}

}  // namespace attncheck::cli
