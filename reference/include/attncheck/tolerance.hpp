// The one place for tolerances and verdicts. Tolerances are derived per element from forward error bounds of the
// computation (dtype unit roundoffs, Dqk, Lk, score and value magnitudes), never tuned; docs/tolerance.md explains.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "attncheck/problem.hpp"
#include "attncheck/reference.hpp"

namespace attncheck {

struct ToleranceModel {
  // Multiplier on the probabilistic rounding-error terms (sqrt(n)*u grows like a sum of n independent errors;
  // lambda = 3 keeps a correct implementation inside with overwhelming probability per element).
  double lambda = 3.0;
  // Relative-error floor for reporting max_rel_err (|a-e| / max(|e|, rel_floor)).
  double rel_floor = 1e-6;
};

// Per-element tolerances for out [B,Hq,Lq,Dv], lse [B,Hq,Lq] and weights [B,Hq,Lq,Lk] of a reference result.
std::vector<double> out_tolerance(const Problem& p, const ReferenceResult& r, const ToleranceModel& m = {});
std::vector<double> lse_tolerance(const Problem& p, const ReferenceResult& r, const ToleranceModel& m = {});
std::vector<double> weights_tolerance(const Problem& p, const ReferenceResult& r, const ToleranceModel& m = {});

// The verdict on one output tensor.
struct TensorVerdict {
  std::string tensor;              // "out", "lse", "weights"
  bool pass = true;
  int64_t n_bad = 0;               // elements outside tolerance
  int64_t n = 0;                   // elements compared
  double max_abs_err = 0, max_rel_err = 0;
  std::array<int64_t, 4> worst{};  // logical index of the element with the largest error/tolerance ratio
  int worst_rank = 0;
  double expected = 0, actual = 0, tolerance = 0;  // at `worst`
  std::string describe() const;    // "out[b=0,h=1,i=5,d=3]: expected 0.12 actual 0.13 |err| 0.01 > tol 1e-3"
};

// Non-finite expected values must be matched exactly in kind (NaN by NaN, +inf by +inf); a non-finite actual
// where a finite value is expected always fails.
TensorVerdict compare_values(const std::string& name, const std::vector<int64_t>& shape,
                             const std::vector<double>& expected, const std::vector<double>& actual,
                             const std::vector<double>& tol, const ToleranceModel& m = {});

struct Verdict {
  bool pass = true;
  std::vector<TensorVerdict> tensors;
  // The tensor verdict with the largest error/tolerance ratio (the first failing one when any fails).
  const TensorVerdict& worst() const;
};

// Judge an implementation's outputs against the reference result for the same problem and inputs.
// Outputs that were requested (want_lse, want_weights) but are missing fail.
Verdict judge(const Problem& p, const ReferenceResult& r, const Outputs& actual, const ToleranceModel& m = {});

}  // namespace attncheck
