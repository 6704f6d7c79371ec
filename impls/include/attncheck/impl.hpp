// The one interface every implementation under test stands behind (reference, cpu, cpu-flash, cuda, cudnn,
// plugins, test-only mutants), and the registry that lists them. The harness asks capabilities before it runs;
// an unsupported case is reported as unsupported, never run half-way and never counted as a pass.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "attncheck/capabilities.hpp"
#include "attncheck/problem.hpp"

namespace attncheck {

// What an implementation declares about itself (attncheck/declarations.hpp; kept apart so that this header stays
// C++17 for nvcc-compiled backends). Capabilities and Support live in attncheck/capabilities.hpp (also C++17).
struct Declarations;
// Gradients of the backward pass (attncheck/backward.hpp).
inline namespace oracle {
struct Gradients;
}  // namespace oracle
// Attention states and their merge (attncheck/merge_problem.hpp, docs/states.md).
inline namespace model {
struct MergeProblem;
struct StoredStates;
}  // namespace model
// A kernel's own partial states (attncheck/state_partials.hpp, docs/states.md).
inline namespace tolerance {
struct KernelPartials;
}  // namespace tolerance

class Impl {
 public:
  virtual ~Impl() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  // Whether the implementation can run on this machine at all (e.g. "no CUDA device: cudaGetDeviceCount -> 100").
  virtual Support available() const { return Support::yes(); }
  virtual Capabilities capabilities() const = 0;
  // Per case; the default checks capabilities. Override to add backend-specific limits.
  virtual Support supports(const Problem& p) const { return check_capabilities(capabilities(), p); }
  // Compute outputs for a validated, supported problem. Outputs are pre-allocated by make_outputs() and
  // poisoned with NaN (+inf under the fully-masked policy nan) by the harness: every element the implementation
  // does not write will fail.
  // Errors are thrown (std::exception) with a message; they are reported as status "error".
  virtual void run(const Problem& p, const Inputs& in, Outputs& out) const = 0;
  // The default derives what the capabilities imply: a single supported fully-masked policy is the declared one;
  // lse and weights are outputs when supported.
  virtual Declarations declarations() const;
  // The backward pass (optional; docs/backward.md). supports_backward: whether gradients of this problem can be
  // computed (default: "backward pass not implemented"). run_backward: dq, dk, dv (and dbias with a bias) of
  // L = Σ dout∘out, given this implementation's forward outputs `fwd` for the same problem run with want_lse;
  // the gradient tensors are pre-allocated (make_gradients) and NaN-poisoned by the harness.
  virtual Support supports_backward(const Problem& p) const;
  virtual void run_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout,
                            Gradients& g) const;
  // Merging attention states (optional; docs/states.md): N stored states -> the merged state, under the problem's
  // conventions. supports_merge defaults to "merge not implemented"; run_merge gets outputs pre-allocated
  // (make_merge_outputs) and NaN-poisoned by the harness.
  virtual Support supports_merge(const MergeProblem& p) const;
  virtual void run_merge(const MergeProblem& p, const StoredStates& in, StoredStates& out) const;
  // A split kernel's own partial states (optional; docs/states.md "A kernel's own partial states"): the states of
  // its key split into `num_splits` parts, before its merge, each with the key range it covers, so the harness can
  // judge each against the reference over those keys (judge_partials). supports_partials defaults to "partial
  // states not exposed".
  virtual Support supports_partials(const Problem& p) const;
  virtual void run_partials(const Problem& p, const Inputs& in, int64_t num_splits, KernelPartials& out) const;
};

using ImplPtr = std::shared_ptr<const Impl>;

// The registry: every built-in implementation compiled into this build, in a fixed order.
// Plugins loaded at run time are appended with register_impl().
const std::vector<ImplPtr>& registry();
void register_impl(ImplPtr impl);
// The implementation called `name`, or nullptr.
ImplPtr find_impl(const std::string& name);

// Run an implementation on a case the way the harness does: validate, check support, allocate, poison with NaN,
// run. Returns the support verdict; outputs are only meaningful when it is ok.
Support run_impl(const Impl& impl, const Problem& p, const Inputs& in, Outputs& out);
// The same for the backward pass: the implementation's forward (want_lse on), then its backward into `g`.
Support run_backward_impl(const Impl& impl, const Problem& p, const Inputs& in, const Tensor& dout, Gradients& g);
// The same for a merge: validate, available, supports_merge, allocate, poison with NaN, run_merge.
Support run_merge_impl(const Impl& impl, const MergeProblem& p, const StoredStates& in, StoredStates& out);

}  // namespace attncheck
