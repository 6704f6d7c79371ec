// The module forward's first-order errors, shared by the module's tolerance and its gradients' bound.
#pragma once

#include <vector>

#include "attncheck/module_trace.hpp"

namespace attncheck::inline tolerance::module_errors {

inline size_t at(int64_t i) { return static_cast<size_t>(i); }

// The forward's first-order errors (module_tolerance.cpp, docs/module.md), which the gradients' bound carries on.
struct ForwardErrors {
  std::vector<double> eq, ek, ev;  // of the projected q, k, v (Heads layout): accumulation and rounding
  std::vector<double> es;          // [B, Hq, Lq, Lk]: of the scores (0 where P = 0)
  std::vector<double> sbar;        // [B, Hq, Lq]: sum_j P_j es_j
  std::vector<double> eo;          // [B, Hq, Lq, Dv]: of the attention output, its rounding included
  std::vector<double> ew;          // [B, Hq, Lq, Lk]: of the weights
};
ForwardErrors forward_errors(const ModuleProblem& m, const ModuleInputs& in, const module_trace::Trace& t);

}  // namespace attncheck::inline tolerance::module_errors
