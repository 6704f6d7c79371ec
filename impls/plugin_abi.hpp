// Internal to attncheck: the pieces of the plugin host (impls/plugin.cpp) that the isolated worker host reuses to
// call a plugin on tensors that live in shared memory. Not installed; plugin authors use attncheck/plugin.h.
#pragma once

#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "attncheck/plugin.h"

namespace attncheck {

// A dlopened, checked plugin: its vtable and converted capabilities. Throws PluginError like load_plugin.
struct OpenedPlugin {
  std::string path;
  const attncheck_plugin* vt = nullptr;
  Capabilities caps;
};
OpenedPlugin open_plugin(const std::string& path);

// The shape and semantic fields of a problem; tensor pointers stay NULL. `diag` must outlive the descriptor.
attncheck_problem describe(const Problem& p, std::vector<int64_t>& diag);

}  // namespace attncheck
