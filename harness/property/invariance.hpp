// Invariance of an implementation under test (docs/invariance.md): the same case run again gives the same bits
// (rerun: forward out, lse, weights, scores; backward dq, dk, dv, dbias), also after another case ran in between;
// a batch entry gives the same bits whatever batch it is computed in (batch: alone, or at another position of
// a larger batch of other sequences, padded to a longer neighbour where the problem allows); the case run under
// other settings of the schedule knobs the implementation exposes (schedule: threads, num_splits, block order) and
// with its inputs in another layout or strides (layout) agrees bit for bit where declared, else within tolerance.
// A clean check is evidence on this run, not a promise. verify --invariance and the property group
// (properties_invariance.cpp) share this code, for built-ins, plugins and workers alike (it only calls run_impl).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attncheck/backward.hpp"
#include "attncheck/impl.hpp"

namespace attncheck::invariance {

// One tensor of two runs compared bit for bit over logical elements (two NaNs are equal whatever their payload).
struct TensorDiff {
  std::string tensor;    // "out", "lse", "weights", "scores", "dq", ...
  int64_t elements = 0;  // elements compared
  int64_t moved = 0;     // elements whose bits differ
  int64_t bits = 0;      // differing bits over them (popcount of the xor of the bit patterns)
  double max_abs = 0;    // largest |a - b| over the moved elements that are finite in both
  std::string first;     // the first moved element: "out[0,1,3,5] 0.1234 (0x3dfcb924) vs 0.1235 (0x3dfcb925)"
};

enum class Kind { rerun, batch, schedule, layout };
// "nondeterministic", "batch-variant", "schedule-variant", "layout-variant": the diagnosis tags of a violation.
const char* tag(Kind k);
const char* name(Kind k);  // "rerun", "batch", "schedule", "layout"

// How the batch, schedule and layout checks compare a variant run with the case as given: as the implementation
// declares (batch: bitwise; schedule: bitwise for the knobs in schedule_bitwise, else within tolerance; layout:
// bitwise when layout_invariant, else within tolerance), or bitwise, or within tolerance for all of them (the
// report still counts the elements and bits that moved). rerun is always bitwise.
enum class Level { declared, bitwise, tolerance };

struct Check {
  Kind kind = Kind::rerun;
  enum Result { invariant, violated, unsupported } result = invariant;
  std::string message;            // one line; a violation starts with its tag, names what moved and the first element
  std::string where;              // a violation: which runs or batch forms differ
  std::vector<TensorDiff> diffs;  // every tensor compared (moved == 0 for the equal ones)
  int runs = 0;                   // implementation runs this check spent beyond the first
  int64_t elements() const;       // compared in all
  int64_t moved() const;
};

struct Options {
  int runs = 3;  // rerun: K runs of the case in all (the caller's first run included), K >= 2
  bool rerun = true;
  bool batch = true;
  bool schedule = false;
  bool layout = false;
  Level level = Level::declared;
  // Whether outputs of the case as given agree with the reference within tolerance: "" when they do, else what
  // fails first. The tolerance level needs it; without it such a comparison is reported unsupported.
  std::function<std::string(const Outputs&)> within_tolerance;
  // The same for the gradients of the backward variants (check_backward_variants).
  std::function<std::string(const Gradients&)> backward_within_tolerance;
};

// The checks of one forward case. `first` holds impl's outputs for (p, in) from a run the caller already made (the
// judged one). Order of runs: run 2 right after the first; then the batch runs (other problems); then runs 3..K,
// each after another case ran (the batch runs, else the same problem with other input values). Returns one Check per
// kind asked, in the order rerun, batch, schedule, layout (the schedule and layout runs come last). When reruns
// differ, a bitwise difference of the other checks is not judged (it cannot be told from a run-to-run one). Exceptions
// of the implementation propagate (the caller reports them as its outcome).
std::vector<Check> check_forward(const Impl& impl, const Problem& p, const Inputs& in, const Outputs& first,
                                 const Options& o);

// The rerun check of the backward pass: run_backward_impl K - 1 more times (another case's backward before each run
// after the second), dq, dk, dv and dbias compared with `first`.
Check check_backward(const Impl& impl, const Problem& p, const Inputs& in, const Tensor& dout, const Gradients& first,
                     int runs);

// The batch, schedule and layout checks of the backward pass (as o asks): each entry's gradients in the unpadded
// batch forms (dout following its entries); run_backward_impl under the other settings of each declared knob, and
// with q, k, v (and the past) in the other layout (dout with them), sequence-major strides and packed slices; dq,
// dk, dv and dbias against `first` bitwise (batch, and schedule and layout where declared), else within tolerance
// (o.backward_within_tolerance). One Check per kind asked, batch, schedule, layout.
std::vector<Check> check_backward_variants(const Impl& impl, const Problem& p, const Inputs& in, const Tensor& dout,
                                           const Gradients& first, const Options& o);

// Bitwise comparison of two backward runs' gradients (dbias when both have it).
std::vector<TensorDiff> diff_gradients(const Gradients& a, const Gradients& b);

// Bitwise comparison of two runs' outputs of the same problem (every output present in `a`).
std::vector<TensorDiff> diff_outputs(const Outputs& a, const Outputs& b);

// Whether the user asked for the checks (attncheck property --invariance, Python check(invariance=True)): then the
// property group checks every implementation, whatever it declares; otherwise only the promises it declares.
void set_asked(bool on);
bool asked();

// The report lines of a violated check, for a diagnosis block: what moved per tensor.
std::vector<std::string> evidence(const Check& c);

}  // namespace attncheck::invariance
