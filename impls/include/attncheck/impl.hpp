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

}  // namespace attncheck
