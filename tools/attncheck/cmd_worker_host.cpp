// `attncheck worker-host --plugin LIB.so | --impl NAME`: the worker side of the worker protocol
// (docs/worker-protocol.md), started by attncheck itself to run a plugin (or, with --isolate, a built-in) in a
// child process. Not meant to be run by hand: it reads requests on stdin and answers on stdout.
#include "attncheck/impl.hpp"
#include "attncheck/module_impl.hpp"
#include "command.hpp"
#include "worker_serve.hpp"

namespace attncheck::cli {
namespace {

std::string g_plugin, g_impl;

int run_worker_host() {
  if (g_plugin.empty() == g_impl.empty())
    throw std::invalid_argument("worker-host: give exactly one of --plugin, --impl");
  std::unique_ptr<worker::Backend> b;
  if (!g_plugin.empty()) {
    b = worker::plugin_backend(g_plugin);
  } else {
    ImplPtr impl = find_impl(g_impl);
    if (!impl) throw std::invalid_argument("worker-host: --impl: unknown implementation '" + g_impl + "'");
    b = worker::impl_backend(impl, find_module_entry(*impl));
  }
  return worker::serve(*b);
}

const Register reg{
    {"worker-host", "Serve one implementation over the worker protocol (started by attncheck)", [](CLI::App& sub) {
       sub.add_option("--plugin", g_plugin, "Plugin library to serve");
       sub.add_option("--impl", g_impl, "Built-in implementation to serve");
       sub.group("");  // hidden from --help: attncheck starts it
       return std::function<int()>(run_worker_host);
     }}};

}  // namespace
}  // namespace attncheck::cli
