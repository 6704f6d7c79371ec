// The tolerance of a module-level attention problem (module_problem.hpp): its outputs and its gradients.
#pragma once

#include <vector>

#include "attncheck/module_problem.hpp"

namespace attncheck {
inline namespace tolerance {

// Per-element tolerances of y and weights for an implementation of the declared module contract (docs/module.md:
// inputs in attn.dtype, fp32 accumulation, q/k/v, the attention output and y rounded to attn.dtype, the
// attention under default_contract(dtype), weights in fp32): a first-order forward-error bound through the
// projections, the softmax and Wo, computed from the inputs in double.
struct ModuleTolerance {
  std::vector<double> y, weights;
};
// With a fault: the bound of the module computed with that fault (the diagnosis' hypotheses).
ModuleTolerance module_tolerance(const ModuleProblem& m, const ModuleInputs& in, ModuleFault fault = ModuleFault::none);

// Per-element bounds of the gradients of an implementation of the declared module backward contract
// (docs/module.md "Backward"): the forward's errors (module_tolerance) carried through the attention's backward
// to first order, the attention backward's own bound (grad_tolerance), the projections' and Wo's gradient GEMMs
// in fp32 and the rounding to the dtype. With a fault: the bound of the gradients computed with that fault.
ModuleGradients module_grad_tolerance(const ModuleProblem& m, const ModuleInputs& in, const std::vector<double>& dy,
                                      ModuleGradFault fault = ModuleGradFault::none);

}  // namespace tolerance
}  // namespace attncheck
