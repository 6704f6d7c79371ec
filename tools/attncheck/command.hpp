// Subcommands register themselves (one file per subcommand, tools/attncheck/cmd_*.cpp), so adding a command
// never edits main.cpp. Exit codes: 0 pass, 1 verification failure, 2 usage or input error.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace attncheck::cli {

struct Command {
  std::string name;
  std::string help;
  // Declare options on the subcommand; return the function that runs it (after parsing) and yields the exit code.
  std::function<std::function<int()>(CLI::App&)> setup;
};

std::vector<Command>& commands();

// --max-memory / --max-work on the subcommands that read files (budget_options.cpp); applied after parsing.
void add_budget_options(CLI::App& sub);
void apply_budget_options();

struct Register {
  explicit Register(Command c) { commands().push_back(std::move(c)); }
};

}  // namespace attncheck::cli
