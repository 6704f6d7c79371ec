// Detection power of the gradient tolerance (docs/backward.md "Detection power"): backward faults injected into a
// flash-style backward and judged at long context, beside how much of the bound correct backwards use (cpu,
// cpu-flash in fp32). Kept apart from the forward's power engine (power.hpp); ctest label power.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attncheck::power {

struct BackwardPowerRow {
  std::string variant;
  bool correct = false;
  int64_t lk = 0;
  double ratio = 0;   // largest error / tolerance over dq, dk, dv (faults: detected iff > 1)
  std::string worst;  // the verdict's worst element
};

// Problem per Lk: B 1, Hq 2 over Hkv 1 (GQA), 4 query rows, Dqk 64, Dv 32, fp32, dense, seeded N(0,1) inputs
// and dO. Variants: cpu, cpu-flash, the correct looped backward, every fault of the real-bug list that applies
// to such a problem, and the subtle faults (backward_mutants.hpp).
std::vector<BackwardPowerRow> backward_power(const std::vector<int64_t>& lks, uint64_t seed = 20261123);

}  // namespace attncheck::power
