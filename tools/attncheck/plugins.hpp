// The shared `--plugin LIB.so` option (repeatable): any subcommand that lists or runs implementations declares it
// and loads the libraries before it looks at the registry, so plugins are treated like built-ins everywhere.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "attncheck/plugin_loader.hpp"

namespace attncheck::cli {

inline void add_plugin_option(CLI::App& sub, std::vector<std::string>& paths) {
  // One library per --plugin (no greedy "--plugin a.so b.so"), so it can never swallow a following argument.
  sub.add_option("--plugin", paths,
                 "Shared library implementing attncheck/plugin.h; registered as an implementation (repeatable)")
      ->allow_extra_args(false);
}

// Throws PluginError (a bad library) or std::invalid_argument (a duplicate name); main turns both into exit 2.
inline void load_plugins(const std::vector<std::string>& paths) {
  for (const auto& path : paths) register_impl(load_plugin(path));
}

}  // namespace attncheck::cli
