// What an implementation declares about itself and the harness judges against (docs/isolation.md#declarations):
// its fully-masked-row policy, precision contract, outputs, determinism. Impl::declarations() returns it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/contract.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/schedule.hpp"

namespace attncheck {

// What an implementation's contract asks of K/V values no query can see (docs/isolation.md#masked-inputs): isolated
// (they may hold anything, NaN and inf included, and must never reach an output: fused kernels skip them) or
// finite_required (a math-path kernel multiplies them by a zero weight, so its contract needs finite inputs
// everywhere).
enum class MaskedInputs : uint8_t { isolated, finite_required };
const char* to_string(MaskedInputs m);                         // "isolated", "finite-required"
MaskedInputs masked_inputs_from_string(const std::string& s);  // throws std::invalid_argument naming the value
// Whether a case is outside a finite_required contract: K or V (past, page pools included) hold a NaN or an
// infinity, or the bias a NaN or +inf (-inf is how a bias masks). Returns the tensors, "" when none.
std::string nonfinite_inputs(const Inputs& in);

// What an implementation declares about itself, used in judging (docs/isolation.md#declarations).
struct Declarations {
  // The fully-masked-row policy it follows natively. A fixture written with another policy it does not support is
  // judged under this one, the reference recomputing the expectation. Empty: it follows the problem's policy.
  std::optional<FullyMasked> fully_masked_policy;
  // Its precision contract per input dtype (attncheck/contract.hpp); a dtype not listed: default_contract(dtype).
  std::map<DType, PrecisionContract> contracts;
  PrecisionContract contract_for(DType t) const {
    const auto it = contracts.find(t);
    return it != contracts.end() ? it->second : default_contract(t);
  }
  std::vector<std::string> outputs = {"out", "lse", "weights"};  // the outputs it can produce
  bool deterministic = false;                                    // the same inputs give the same bits, run after run
  // A batch entry gives the same bits whatever else is in the batch and wherever it sits (docs/invariance.md).
  bool batch_invariant = false;
  MaskedInputs masked_inputs = MaskedInputs::isolated;
  // The schedule knobs it honours (attncheck/schedule.hpp: ScheduleKnob bits) and, among them, those across whose
  // settings it gives the same bits; across the others it promises agreement within tolerance (docs/invariance.md).
  unsigned schedule_knobs = 0, schedule_bitwise = 0;
  // The same data in another layout (BHSD, BSHD) or with other strides gives the same bits.
  bool layout_invariant = false;
  bool backward = false;  // it also computes gradients
};

// What the capabilities imply: a single supported fully-masked policy is the declared one; lse and weights are
// outputs when supported. Impl::declarations() returns this unless overridden.
Declarations default_declarations(const Capabilities& c);
// The same for an implementation that decodes fp8 inputs and keeps P in its working precision (the reference, the
// CPU loops, the example plugin): the default contracts, with p=exact for e4m3 and e5m2.
Declarations p_exact_declarations(const Capabilities& c);

}  // namespace attncheck
