// Tolerances and the verdict for gradients (dq, dk, dv, dbias), derived like the forward's from the row quantities
// that drive the error: |dP|, |D|, the spread of P (GradScales' *_abs sums), the accumulation lengths (Lk for dQ,
// the group's queries for dK/dV, the broadcast set for dBias) and the precision contract. docs/backward.md.
#pragma once

#include "attncheck/contract.hpp"
#include "attncheck/grad_scales.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {
inline namespace tolerance {

struct GradTolerance {
  std::vector<double> dq, dk, dv, dbias;  // per element, same layout as BackwardResult's
};

// fwd: the error scales of the reference forward of the same problem and inputs (its row score magnitudes); m.contract:
// the implementation's declared precision contract (default_contract(p.dtype) when empty); m.scale multiplies all.
GradTolerance grad_tolerance(const Problem& p, const ErrorScales& fwd, const ExpectedGradients& r,
                             const ToleranceModel& m = {});

// Judge delivered gradients against the reference gradients; a missing dbias (bias present) fails.
Verdict judge_backward(const Problem& p, const ErrorScales& fwd, const ExpectedGradients& r, const Gradients& actual,
                       const ToleranceModel& m = {});

}  // namespace tolerance
}  // namespace attncheck
