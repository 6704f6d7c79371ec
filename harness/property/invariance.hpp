// Invariance of an implementation under test (docs/invariance.md): the same case run again gives the same bits
// (rerun: forward out, lse, weights, scores; backward dq, dk, dv, dbias), also after another case ran in between;
// and a batch entry gives the same bits whatever batch it is computed in (batch: alone, or at another position of
// a larger batch of other sequences, padded to a longer neighbour where the problem allows). A clean check is
// evidence on this run, not a promise. verify --invariance and the property group (properties_invariance.cpp)
// share this code, for built-ins, plugins and workers alike (it only calls run_impl).
#pragma once

#include <cstdint>
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

enum class Kind { rerun, batch };
// "nondeterministic" (rerun) or "batch-variant" (batch): the diagnosis tags of a violation.
const char* tag(Kind k);

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
  int runs = 3;          // rerun: K runs of the case in all (the caller's first run included), K >= 2
  bool rerun = true;
  bool batch = true;
};

// The checks of one forward case. `first` holds impl's outputs for (p, in) from a run the caller already made (the
// judged one). Order of runs: run 2 right after the first; then the batch runs (other problems); then runs 3..K,
// each after another case ran (the batch runs, else the same problem with other input values). Returns one Check per
// kind asked, rerun first. When reruns differ, the batch check is not judged (it cannot tell its differences from
// run-to-run ones) and says so. Exceptions of the implementation propagate (the caller reports them as its outcome).
std::vector<Check> check_forward(const Impl& impl, const Problem& p, const Inputs& in, const Outputs& first,
                                 const Options& o);

// The rerun check of the backward pass: run_backward_impl K - 1 more times (another case's backward before each run
// after the second), dq, dk, dv and dbias compared with `first`.
Check check_backward(const Impl& impl, const Problem& p, const Inputs& in, const Tensor& dout, const Gradients& first,
                     int runs);

// Bitwise comparison of two runs' outputs of the same problem (every output present in `a`).
std::vector<TensorDiff> diff_outputs(const Outputs& a, const Outputs& b);

// Whether the user asked for the checks (attncheck property --invariance, Python check(invariance=True)): then the
// property group checks every implementation, whatever it declares; otherwise only the promises it declares.
void set_asked(bool on);
bool asked();

// The report lines of a violated check, for a diagnosis block: what moved per tensor.
std::vector<std::string> evidence(const Check& c);

}  // namespace attncheck::invariance
