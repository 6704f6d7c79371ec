// Test-only implementations for `attncheck selftest`: deliberately wrong "mutants" (each a bug class seen in public
// attention kernels) that the property suite must kill, and correct-but-different variants (other summation
// orders, online softmax with odd blocks, P rounded to the input dtype) that it must pass. Never in registry().
#pragma once

#include <string>
#include <vector>

#include "attncheck/impl.hpp"

namespace attncheck::mutants {

struct Entry {
  ImplPtr impl;
  bool correct;     // true: a correct variant (must pass); false: a mutant (must be killed)
  std::string bug;  // what is wrong (or what differs) in one line
};

const std::vector<Entry>& catalogue();

// The same kernel declaring the whole modification library: a classic mutant then runs (correctly, apart from its
// bug) on modification fixtures too, which validates the diagnoser there. The catalogue's classic mutants keep the
// classic feature set.
ImplPtr declaring_library(const Entry& e);

}  // namespace attncheck::mutants
