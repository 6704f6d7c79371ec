// attncheck CLI entry point: collects the self-registered subcommands, parses, maps errors to exit codes.
// Exit codes: 0 pass, 1 verification failure, 2 usage or input error, 128 + signal when interrupted (130 for
// Ctrl-C, cancel.hpp). Only this file chooses exit codes for exceptions: library code throws with a message naming
// the field and the values.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <unistd.h>

#include "attncheck/cancel.hpp"
#include "attncheck/threads.hpp"
#include "command.hpp"
#include "serve.hpp"

namespace attncheck::cli {
std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}
}  // namespace attncheck::cli

namespace {
int run_cli(int argc, char** argv) {
  using namespace attncheck::cli;
  CLI::App app{"attncheck: verify scaled dot-product attention implementations against a looped reference"};
  app.require_subcommand(1);
  auto& cmds = commands();
  std::sort(cmds.begin(), cmds.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  // A command named first needs only its own options: building every command's option set costs about a
  // millisecond, which is most of a small request through `attncheck serve`. Anything else (help, an unknown
  // word, no command) gets the whole set, so its messages list every command.
  const auto named =
      std::find_if(cmds.begin(), cmds.end(), [&](const Command& c) { return argc > 1 && c.name == argv[1]; });
  std::vector<std::pair<CLI::App*, std::function<int()>>> runners;
  for (auto& c : cmds) {
    if (named != cmds.end() && &c != &*named) continue;
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runners.emplace_back(sub, c.setup(*sub));
    add_budget_options(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  attncheck::install_cancel_handlers();  // Ctrl-C / SIGTERM: exit 128 + signal at the next step, no half file
  try {
    attncheck::default_threads();  // a bad ATTNCHECK_THREADS is a usage error before any work starts
    apply_budget_options();
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const attncheck::Cancelled& e) {
    std::fprintf(stderr, "attncheck: %s\n", e.what());
    return 128 + e.signal;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attncheck: error: %s\n", e.what());
    return 2;
  }
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  // Line-buffered even into a pipe or file: a run that is killed (CI timeout, OOM killer) still shows every case
  // it finished.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // `attncheck serve` (serve.hpp) forks this process before any command has run, so each request starts clean.
  if (argc == 2 && std::string(argv[1]) == "serve") {
    // Every child of the server would otherwise resolve, lazily and again, each library function it calls (a
    // fifth of a small request's CPU): the server binds them all once, before its first fork, by starting
    // itself again with LD_BIND_NOW. The variables are gone again before any command runs.
    if (!std::getenv("ATTNCHECK_SERVE_BOUND") && !std::getenv("LD_BIND_NOW")) {
      setenv("LD_BIND_NOW", "1", 1);
      setenv("ATTNCHECK_SERVE_BOUND", "1", 1);
      execv("/proc/self/exe", argv);  // on failure, serve unbound
    }
    if (std::getenv("ATTNCHECK_SERVE_BOUND")) {
      unsetenv("LD_BIND_NOW");
      unsetenv("ATTNCHECK_SERVE_BOUND");
    }
    return attncheck::cli::serve(run_cli);
  }
  return run_cli(argc, argv);
}
