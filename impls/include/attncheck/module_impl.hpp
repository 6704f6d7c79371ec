// Module entries: what an implementation offers to run a whole attention module (projections, heads, attention,
// Wo; module_problem.hpp) and be judged on module fixtures. An implementation without one reports every module
// fixture as unsupported. docs/module.md.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "attncheck/capabilities.hpp"
#include "attncheck/module_problem.hpp"

namespace attncheck {

// y [B, Lq, d_out] in the module dtype; weights (with attn.want_weights) [B, Hq, Lq, Lk] or averaged [B, Lq, Lk],
// in attn.stat_dtype().
struct ModuleOutputs {
  Tensor y;
  std::optional<Tensor> weights;
};
ModuleOutputs make_module_outputs(const ModuleProblem& m);

// Gradients as a module entry delivers them (L = sum(dy * y)): one tensor per name of module_grad_names ("dx",
// "dwq", ..., "dwo", "dbo", "dbias"), shaped like the input it names and in that input's dtype.
using ModuleGradOutputs = std::map<std::string, Tensor>;

class ModuleImpl {
 public:
  virtual ~ModuleImpl() = default;
  virtual std::string name() const = 0;  // the implementation's name (the row of verify), "cpu~head-split" for mutants
  virtual Support supports(const ModuleProblem& m) const = 0;
  // Outputs are allocated and NaN-poisoned by run_module: every element left unwritten fails.
  virtual void run(const ModuleProblem& m, const ModuleInputs& in, ModuleOutputs& out) const = 0;
  // The backward (optional): every gradient of module_grad_names for dy [B, Lq, d_out] in the module dtype.
  virtual Support supports_backward(const ModuleProblem&) const {
    return Support::no("module backward not implemented");
  }
  virtual void run_backward(const ModuleProblem&, const ModuleInputs&, const Tensor& /*dy*/, ModuleGradOutputs&) const {
  }
};
using ModuleImplPtr = std::shared_ptr<const ModuleImpl>;

// The module entry of the built-in implementation called `impl_name`, or nullptr when it has none.
ModuleImplPtr find_module_entry(const std::string& impl_name);

class Impl;
// Implementations whose module entry travels with the implementation object (plugins, workers: the module is run
// where the attention is) derive from this beside Impl.
class ModuleProvider {
 public:
  virtual ~ModuleProvider() = default;
  virtual ModuleImplPtr module_entry() const = 0;  // nullptr when it offers none
};
// The module entry of this implementation object: its own (ModuleProvider), else the built-in entry of the
// registry's implementation of that name (only for that very object), else nullptr.
ModuleImplPtr find_module_entry(const Impl& impl);
// Test-only module mutants: the `cpu` entry with a module fault injected (empty when cpu is not built).
std::vector<ModuleImplPtr> module_mutants();
// The same for the backward: the `cpu` entry with one ModuleGradFault each (module_grad_faults() order).
std::vector<ModuleImplPtr> module_grad_mutants();

// Validate, ask supports, allocate, poison with NaN, run. Outputs are meaningful only when the result is ok.
Support run_module(const ModuleImpl& impl, const ModuleProblem& m, const ModuleInputs& in, ModuleOutputs& out);
// Validate (dy's shape and dtype too), ask supports and supports_backward, allocate every gradient, poison with
// NaN, run the backward.
Support run_module_backward(const ModuleImpl& impl, const ModuleProblem& m, const ModuleInputs& in, const Tensor& dy,
                            ModuleGradOutputs& g);

}  // namespace attncheck
