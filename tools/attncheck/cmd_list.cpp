// `attncheck list`: every implementation, available or not (with the reason), and its capabilities
// (verify::describe_implementation).
#include <cstdio>
#include <string>

#include "attncheck/impl.hpp"
#include "command.hpp"
#include "describe_impl.hpp"
#include "plugins.hpp"

namespace attncheck::cli {
namespace {

std::vector<std::string> g_plugins;

int run_list() {
  load_plugins(g_plugins);
  for (const auto& impl : maybe_isolate(registry())) std::fputs(verify::describe_implementation(*impl).c_str(), stdout);
  return 0;
}

const Register reg{{"list", "List implementations, their availability and capabilities", [](CLI::App& sub) {
                      add_plugin_option(sub, g_plugins);
                      return std::function<int()>(run_list);
                    }}};

}  // namespace
}  // namespace attncheck::cli
