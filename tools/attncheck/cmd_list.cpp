// `attncheck list`: every implementation, available or not (with the reason), and its capabilities.
#include <cstdio>

#include "attncheck/impl.hpp"
#include "command.hpp"

namespace attncheck::cli {
namespace {

int run_list() {
  for (const auto& impl : registry()) {
    const Support a = impl->available();
    std::printf("%-16s %-12s %s\n", impl->name().c_str(), a.ok ? "available" : "unavailable",
                a.ok ? impl->description().c_str() : a.reason.c_str());
  }
  return 0;
}

const Register reg{{"list", "List implementations, their availability and capabilities",
                    [](CLI::App&) { return std::function<int()>(run_list); }}};

}  // namespace
}  // namespace attncheck::cli
