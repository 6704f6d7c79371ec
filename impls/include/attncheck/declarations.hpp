// What an implementation declares about itself and the harness judges against (docs/isolation.md#declarations):
// its fully-masked-row policy, precision contract, outputs, determinism. Impl::declarations() returns it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/contract.hpp"
#include "attncheck/impl.hpp"

namespace attncheck {

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
  bool deterministic = false;  // the same inputs give the same bits, run after run
  // A batch entry gives the same bits whatever else is in the batch and wherever it sits (docs/invariance.md).
  bool batch_invariant = false;
  bool backward = false;       // it also computes gradients
};

// What the capabilities imply: a single supported fully-masked policy is the declared one; lse and weights are
// outputs when supported. Impl::declarations() returns this unless overridden.
Declarations default_declarations(const Capabilities& c);
// The same for an implementation that decodes fp8 inputs and keeps P in its working precision (the reference, the
// CPU loops, the example plugin): the default contracts, with p=exact for e4m3 and e5m2.
Declarations p_exact_declarations(const Capabilities& c);

}  // namespace attncheck
