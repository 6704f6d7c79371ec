// Loading a user's implementation from a shared library that implements the C plugin ABI (attncheck/plugin.h).
// The loaded plugin is an ordinary attncheck::Impl: register it with register_impl() and every harness path
// (verify, compare, the property suite) treats it like a built-in.
#pragma once

#include <stdexcept>
#include <string>

#include "attncheck/impl.hpp"

namespace attncheck {

// Thrown for a library that cannot be used: dlopen failure, missing entry symbol, ABI version mismatch, bad
// vtable or capabilities. The message names the file and, for a version mismatch, both versions.
struct PluginError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// dlopen `path`, check the ABI and wrap the plugin as an Impl. The library stays loaded for the life of the
// process (the returned Impl may outlive every reference to it in static destructors).
ImplPtr load_plugin(const std::string& path);

}  // namespace attncheck
