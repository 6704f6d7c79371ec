// The module reference's traced passes: its forward and backward with the values they pass through (the projection
// rows, the projected heads, the attention that ran and its backward), which the module's tolerance
// (module_tolerance.cpp, module_grad_tolerance.cpp) reads, as the attention's tolerance reads row_trace.hpp.
#pragma once

#include <vector>

#include "attncheck/backward.hpp"
#include "attncheck/module_problem.hpp"
#include "attncheck/reference.hpp"

namespace attncheck::inline oracle::module_trace {

// One projection's weight rows selected from wq/wk/wv or from the packed wqkv, as a dense [rows, in] matrix.
struct Rows {
  int64_t rows = 0, in = 0;
  std::vector<double> w, b;  // b empty without a bias
};

// q, k or v after the projection and the head split, [B, H, L, D] row-major: exact values and the magnitudes
// |b| + sum_e |x_e||W_e| their accumulation errors scale with.
struct Heads {
  int64_t H = 0, L = 0, D = 0;
  std::vector<double> val, mag;
};

// Everything the tolerance model and the backward need besides the result.
struct Trace {
  Problem attn;  // the fp64 attention that ran
  Inputs ai;     // its inputs (q, k, v in fp64, the module's mask, bias, keep)
  Heads q, k, v;
  ReferenceResult r;           // its out [B, Hq, Lq, Dv] and pre-dropout weights
  std::vector<double> merged;  // [B, Lq, Hq*Dv]
};

// The backward's intermediate values (module_backward.cpp): the forward's trace, dL/d(merged) [B, Lq, Hq*Dv],
// the same as the attention's dO [B, Hq, Lq, Dv], and the attention's own backward of it.
struct BackwardTrace {
  Trace t;
  std::vector<double> dmerged;
  Tensor dout;
  BackwardResult a;
};
// The attention's forward rows go to observer as well, when given (row_trace.hpp), its backward rows to
// grad_observer (grad_trace.hpp).
void backward_trace(const ModuleProblem& m, const ModuleInputs& in, const std::vector<double>& dy, BackwardTrace& bt,
                    RowObserver* observer = nullptr, GradObserver* grad_observer = nullptr);

// The separate-form gradients dw[which], db[which] (which = 0 q, 1 k, 2 v) placed into the module's packing.
void pack_gradients(const ModuleProblem& m, const std::vector<double> (&dw)[3], const std::vector<double> (&db)[3],
                    ModuleGradients& g);

Rows select(const ModuleProblem& m, const ModuleInputs& in, int which, ModuleFault fault);
ModuleResult forward(const ModuleProblem& m, const ModuleInputs& in, ModuleFault fault, Trace& t,
                     RowObserver* observer = nullptr);

}  // namespace attncheck::inline oracle::module_trace
