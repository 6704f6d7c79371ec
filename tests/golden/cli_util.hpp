// Helpers for tests that run the attncheck binary: run a command, capture its output and exit code; scratch dirs.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace attncheck::test {

struct Run {
  int rc = -1;
  std::string out;  // stdout and stderr together
};

// Runs a shell command line (stderr joined to stdout); rc is -1 when the shell itself dies by a signal.
inline Run run_shell(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs the attncheck binary with `args`.
inline Run run(const std::string& args) { return run_shell(std::string(ATTNCHECK_EXE) + " " + args); }

// Scratch directories are removed when the test process exits.
struct ScratchDirs {
  std::vector<std::filesystem::path> dirs;
  ~ScratchDirs() {
    std::error_code ec;
    for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};

inline std::filesystem::path scratch(const std::string& name) {
  static ScratchDirs all;
  auto d = std::filesystem::temp_directory_path() / ("attncheck_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  all.dirs.push_back(d);
  return d;
}

inline std::string golden_case(const std::string& file) { return std::string(GOLDEN_DIR) + "/cases/" + file; }

}  // namespace attncheck::test
