// `attncheck list`: every implementation, available or not (with the reason), and its capabilities.
#include <cstdio>

#include "attncheck/impl.hpp"
#include "command.hpp"
#include "plugins.hpp"

namespace attncheck::cli {
namespace {

std::vector<std::string> g_plugins;

int run_list() {
  load_plugins(g_plugins);
  for (const auto& impl : registry()) {
    const Support a = impl->available();
    std::printf("%-16s %-12s %s\n", impl->name().c_str(), a.ok ? "available" : "unavailable",
                a.ok ? impl->description().c_str() : a.reason.c_str());
  }
  return 0;
}

const Register reg{{"list", "List implementations, their availability and capabilities",
                    [](CLI::App& sub) {
                      add_plugin_option(sub, g_plugins);
                      return std::function<int()>(run_list);
                    }}};

}  // namespace
}  // namespace attncheck::cli
