// The fp64 reference of a module-level attention problem (module_problem.hpp) and its backward.
#pragma once

#include <vector>

#include "attncheck/module_problem.hpp"

namespace attncheck {
inline namespace oracle {

// The fp64 reference: the seeds' per-token loops (docs/module.md), no rounding anywhere after the inputs.
// `fault` computes the module with that deviation instead (diagnosis hypotheses). The keep-mask of
// dropout_after_projection is keep[b, 0, i, c % Lk] applied to y[b, i, c].
ModuleResult reference_module(const ModuleProblem& m, const ModuleInputs& in, ModuleFault fault = ModuleFault::none);

// The gradients of L = sum(dy * y) (dy [B, Lq, d_out]) with respect to every module input (ModuleGradients).
ModuleGradients reference_module_backward(const ModuleProblem& m, const ModuleInputs& in, const std::vector<double>& dy,
                                          ModuleGradFault fault = ModuleGradFault::none);

}  // namespace oracle
}  // namespace attncheck
