// The one place for tolerances and verdicts. Tolerances are derived per element from forward error bounds of the
// computation (dtype unit roundoffs, Dqk, Lk, score and value magnitudes), never tuned; docs/tolerance.md explains.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/accuracy.hpp"
#include "attncheck/contract.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/error_scales.hpp"

namespace attncheck {
inline namespace tolerance {

struct ToleranceModel {
  // Multiplier on the probabilistic rounding-error terms (sqrt(n)*u grows like a sum of n independent errors;
  // lambda = 3 keeps a correct implementation inside with overwhelming probability per element).
  double lambda = 3.0;
  // Relative-error floor for reporting max_rel_err (|a-e| / max(|e|, rel_floor)).
  double rel_floor = 1e-6;
  // Explicit user scaling of every bound (`--tol-scale X`); 1 = the derived bound. Reports record it.
  double scale = 1.0;
  // The candidate's declared precision contract; empty = default_contract(problem dtype).
  std::optional<PrecisionContract> contract;
  // An exact case (fixture attribute exact_out, docs/tolerance.md "Exact cases"): the problem was constructed so
  // that out's exact value is representable in the output dtype and every computation within the contract rounds
  // to it, so out is judged for equality (tolerance 0); lse and weights keep their bounds.
  bool exact_out = false;
};

// The terms a bound is made of (docs/tolerance.md); a failure names the one that dominated at its worst element.
enum class TolTerm : uint8_t { scores, operands, systematic, key_sum, division, storage, floor_ };
constexpr int kTolTerms = 7;
const char* to_string(TolTerm t);
using TolTerms = std::array<double, kTolTerms>;

// The terms of one element's bound: out element n ([B,Hq,Lq,Dv] row-major), lse row, weights element
// ([B,Hq,Lq,Lk]). `delivered` is the dtype the candidate delivered the output in.
TolTerms out_terms(const Problem& p, const ExpectedAttention& r, size_t n, DType delivered, const ToleranceModel& m);
TolTerms lse_terms(const Problem& p, const ExpectedAttention& r, size_t row, DType delivered, const ToleranceModel& m);
TolTerms weights_terms(const Problem& p, const ExpectedAttention& r, size_t n, DType delivered,
                       const ToleranceModel& m);
// Raw scores element n ([B,Hq,Lq,Lk], problem.scores_out): one score's own error, its storage, the floor.
TolTerms scores_terms(const Problem& p, const ExpectedAttention& r, size_t n, DType delivered, const ToleranceModel& m);
// Max-logit row n ([B,Hq,Lq]): |max_j s'_j - max_j s_j| <= max_j |s'_j - s_j|, so the largest one-score bound over
// the row's visible keys (the row's largest a, b, |s|), its storage, the floor; exact for a row with no visible key.
TolTerms max_logit_terms(const Problem& p, const ExpectedAttention& r, size_t n, DType delivered,
                         const ToleranceModel& m);

// Per-element tolerances (sums of the terms times m.scale) for out [B,Hq,Lq,Dv], lse [B,Hq,Lq] and weights
// [B,Hq,Lq,Lk] of a reference result. Without `delivered`: out in the problem dtype, lse/weights in stat_dtype.
std::vector<double> out_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m = {},
                                  std::optional<DType> delivered = {});
// The bound of the fp8 output's amax_o (fp8_out.hpp): the largest bound of O before its fp8 store.
double amax_o_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m = {});
std::vector<double> lse_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m = {},
                                  std::optional<DType> delivered = {});
std::vector<double> weights_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m = {},
                                      std::optional<DType> delivered = {});
std::vector<double> scores_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m = {},
                                     std::optional<DType> delivered = {});
// Per row [B,Hq,Lq]; the heads form takes each head's largest row tolerance (judge()).
std::vector<double> max_logit_tolerance(const Problem& p, const ExpectedAttention& r, const ToleranceModel& m = {},
                                        std::optional<DType> delivered = {});

inline constexpr const char* kExactDominant = "exact";

// The verdict on one output tensor.
struct TensorVerdict {
  std::string tensor;  // "out", "lse", "weights"
  bool pass = true;
  int64_t n_bad = 0;  // elements outside tolerance
  int64_t n = 0;      // elements compared
  double max_abs_err = 0, max_rel_err = 0;
  std::array<int64_t, 4> worst{};  // logical index of the element with the largest error/tolerance ratio
  int worst_rank = 0;
  double expected = 0, actual = 0, tolerance = 0;  // at `worst`
  std::string dominant;          // the bound's largest term at `worst` ("key_sum", "storage", ...), if known;
                                 // kExactDominant for the out of an exact case
  Accuracy accuracy;             // the errors' profile (accuracy.hpp); filled by judge for out, lse, weights, scores
  std::string describe() const;  // "out[b=0,h=1,i=5,d=3]: expected 0.12 actual 0.13 |err| 0.01 > tol 1e-3"
};

// Non-finite expected values must be matched exactly in kind (NaN by NaN, +inf by +inf); a non-finite actual
// where a finite value is expected always fails. With `judged`, only elements n whose row n / row_len is marked
// are compared (sampled reference rows).
TensorVerdict compare_values(const std::string& name, const std::vector<int64_t>& shape,
                             const std::vector<double>& expected, const std::vector<double>& actual,
                             const std::vector<double>& tol, const ToleranceModel& m = {},
                             const std::vector<char>* judged = nullptr, size_t row_len = 1);

// The checks that need no reference, on every row of a result whose reference covers sampled rows only: out
// finite (NaN allowed only in rows the candidate reports fully masked, lse -inf, under the nan policy), lse
// finite or -inf, weight rows summing to 1 within u_delivered + Lk * u_acc. One verdict, tensor "all_rows".
TensorVerdict reference_free_checks(const Problem& p, const Outputs& actual);

struct Verdict {
  bool pass = true;
  std::vector<TensorVerdict> tensors;
  // The tensor verdict with the largest error/tolerance ratio (the first failing one when any fails).
  const TensorVerdict& worst() const;
};

// Judge an implementation's outputs against the reference result for the same problem and inputs.
// Outputs that were requested (want_lse, want_weights) but are missing fail.
Verdict judge(const Problem& p, const ExpectedAttention& r, const Outputs& actual, const ToleranceModel& m = {});

}  // namespace tolerance
}  // namespace attncheck
