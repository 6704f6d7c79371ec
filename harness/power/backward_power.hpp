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
  double ratio = 0;                 // largest error / tolerance over dq, dk, dv (faults: detected iff > 1)
  std::string worst;                // the verdict's worst element
  int64_t position = 0;             // RoPE rows: the largest position of the problem
  double error = 0, tolerance = 0;  // the worst element's |actual - expected| and tolerance
};

// Problem per Lk: B 1, Hq 2 over Hkv 1 (GQA), 4 query rows, Dqk 64, Dv 32, fp32, dense, seeded N(0,1) inputs
// and dO. Variants: cpu, cpu-flash, the correct looped backward, every fault of the real-bug list that applies
// to such a problem, and the subtle faults (backward_mutants.hpp).
std::vector<BackwardPowerRow> backward_power(const std::vector<int64_t>& lks, uint64_t seed = 20261123);

// The same problem with causal NeoX RoPE (rotary_dim = Dqk = 64, theta 10000) at Lk `lk`, its last key at each of
// `positions` (rope_offsets = position - Lk, at least 0). Variants, each judged under the rope contract it
// declares: cpu-flash (exact), the looped backward with fp32 angles, with an fp16 and a bf16 cos/sin table
// (correct), and the RoPE faults of the backward mutants with fp32 angles.
std::vector<BackwardPowerRow> backward_rope_power(const std::vector<int64_t>& positions, int64_t lk = 1024,
                                                  uint64_t seed = 20261128);

}  // namespace attncheck::power
