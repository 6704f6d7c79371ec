// How a run of an implementation can go wrong beyond an ordinary error: the isolation layer (worker processes,
// guard bands, input checksums) throws RunFailure with the outcome, and verify reports that outcome verbatim.
// Outcome names are part of the JSON/JUnit report format (docs/isolation.md).
#pragma once

#include <stdexcept>
#include <string>

namespace attncheck {

// crashed: killed by a signal; timeout: exceeded its per-case time; exited: the process ended (any status) in the
// middle of a case; modified-input: an input tensor changed during the call; out-of-bounds: a guard band around an
// output was written. A plain thrown std::exception stays outcome "error".
class RunFailure : public std::runtime_error {
 public:
  RunFailure(std::string outcome, const std::string& message)
      : std::runtime_error(message), outcome_(std::move(outcome)) {}
  const std::string& outcome() const { return outcome_; }

 private:
  std::string outcome_;
};

}  // namespace attncheck
