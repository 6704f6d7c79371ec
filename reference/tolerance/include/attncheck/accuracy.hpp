// The accuracy profile of one compared tensor: how much of its bound the errors use and which precision they are
// consistent with. Verdicts never use it; reports carry it so that a run can be compared with an earlier one
// (docs/regression.md), where a kernel that got less accurate but still passes shows up.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace tolerance {

// Upper edges of the ulp histogram's bins: |err| = 0, <= 0.5, <= 1, <= 2, <= 4 ulps, and more.
inline constexpr std::array<double, 5> kUlpEdges{0.0, 0.5, 1.0, 2.0, 4.0};

struct Accuracy {
  bool present = false;          // profiled: at least one element with a finite expected value
  DType ulp_dtype = DType::f64;  // the dtype whose ulps are counted: the one the tensor was delivered in
  int64_t n = 0;                 // elements profiled (finite expected value)
  int64_t n_nonfinite = 0;       // of those, with a non-finite actual (in the histogram's last bin, not in the sums)
  double share = 0;              // max |err| / tolerance: 1 = the bound used up (infinite where a zero bound is missed)
  double rms_rel = 0;            // sqrt(sum err^2 / sum expected^2): the RMS error relative to the reference's scale
  // Mean signed error in ulps of ulp_dtype, as sums: sum(err) / sum(ulp(expected)). Weighting by the ulp keeps
  // elements that cancel to near zero (whose ulps are tiny) from dominating. bias_mag_ulp uses sign(expected)*err:
  // about -0.5 for output truncation toward zero, about 0 for rounding to nearest.
  double bias_ulp = 0, bias_mag_ulp = 0;
  std::array<int64_t, kUlpEdges.size() + 1> ulp_hist{};  // |err| / ulp(expected) per bin of kUlpEdges
  // -log2(rms_rel): the bits of relative precision the errors are consistent with (empty when every error is 0 or
  // the reference is all zero). A correctly rounded fp32 output gives about 24.5, fp32 accumulation over a few
  // hundred terms about 22-23, an fp64 computation rounded to fp64 about 53.
  std::optional<double> effective_bits;
  // The sums the figures above derive from, kept so that profiles of several comparisons merge exactly.
  double err2 = 0, ref2 = 0, err_sum = 0, err_mag_sum = 0, ulp_sum = 0;
};

// The spacing of `t`'s values at |x| (subnormal spacing below the smallest normal); t must be a float dtype.
double ulp_of(DType t, double x);
// Significand bits of a float dtype (53, 24, 11, 8, 4, 3).
int precision_bits(DType t);

// Profile of the elements compared by compare_values (same arguments; `judged` / `row_len` select sampled rows).
Accuracy profile_accuracy(const std::vector<double>& expected, const std::vector<double>& actual,
                          const std::vector<double>& tol, DType ulp_dtype, const std::vector<char>* judged = nullptr,
                          size_t row_len = 1);

// Adds the profile `part` into `total` as if both had been one comparison (same ulp dtype required; an empty total
// takes part's). Used where one tensor is compared over many cases (the property suite).
void merge_accuracy(Accuracy& total, const Accuracy& part);

}  // namespace tolerance
}  // namespace attncheck
