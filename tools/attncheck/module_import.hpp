// `attncheck import --module`: a module fixture from x (x2), the module's weights and flags (cmd_module.cpp), and
// `attncheck compare-module`'s reading of a candidate's y and weights. docs/module.md "Your own module".
#pragma once

#include <optional>
#include <string>

namespace attncheck::cli {

struct ModuleImportFlags {
  std::string input, out, name, dtype, causal, packing, policy = "zero";
  int64_t heads = 0, kv_heads = 0;
  std::optional<double> scale;
  double dropout_p = 0;
  uint64_t dropout_seed = 0;
  bool want_weights = false, average_weights = false;
};
int import_module(const ModuleImportFlags& f);

}  // namespace attncheck::cli
