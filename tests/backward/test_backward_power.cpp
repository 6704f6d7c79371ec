// Backward detection power (harness/power/backward_power.hpp). At long context: every fault of the real-bug list
// and every subtle fault is detected at Lk = 1k, 8k and 32k in fp32, except the one known miss documented in
// docs/backward.md "Detection power" (D from a bf16-rounded O); cpu and cpu-flash stay inside the bound and use at
// least 1% of it at 32k (the bound is tight, not vacuous). At long RoPE positions: the RoPE faults below.
#include <gtest/gtest.h>

#include <cstdio>

#include "backward_power.hpp"

using namespace attncheck::power;

TEST(BackwardPower, FaultsDetectedCorrectVariantsInsideAtLongContext) {
  const std::vector<BackwardPowerRow> rows = backward_power({1024, 8192, 32768});
  for (const BackwardPowerRow& r : rows) {
    std::printf("[backward power] Lk=%-6lld %-24s %s ratio %.3g\n", static_cast<long long>(r.lk), r.variant.c_str(),
                r.correct ? "(correct)" : "         ", r.ratio);
    if (r.correct) {
      EXPECT_LE(r.ratio, 1.0) << r.variant << " Lk=" << r.lk << ": false alarm: " << r.worst;
      if (r.lk == 32768 && r.variant.rfind("cpu", 0) == 0) {
        EXPECT_GE(r.ratio, 0.01) << r.variant;
      }
    } else if (r.variant == "bwd-d-from-bf16-o") {
      // Known miss: a row-constant error of D shifts dP, which softmax's Σ_j P_ij = 1 cancels in dQ/dK except
      // through the weighted mean of the keys; the bound charges |D| on every key. If it is ever caught, update
      // the docs' table.
      EXPECT_LE(r.ratio, 1.0) << r.variant << " Lk=" << r.lk << " is now detected: update docs/backward.md";
    } else {
      EXPECT_GT(r.ratio, 1.0) << r.variant << " Lk=" << r.lk << " not detected: " << r.worst;
    }
  }
  EXPECT_EQ(rows.size(), 3u * 12u);
}

// RoPE in the backward under the fp32-angle contract, at Lk = 1k: a backward that ignores RoPE, and one that rotates
// the gradients back by R instead of Rᵀ, fail with positions up to 128k; the fp32-angle kernel, the fp16 and bf16
// cos/sin tables (each under the contract it declares) and cpu-flash (exact angles) pass at every position up to
// 1M. From 512k the worst-case angle bound is wider than these faults (docs/backward.md "RoPE angles").
TEST(BackwardPower, RopeFaultsCaughtAtLongPositionsCorrectAngleKernelsPass) {
  const std::vector<BackwardPowerRow> rows = backward_rope_power({1024, 65536, 131072, 524288, 1048576});
  for (const BackwardPowerRow& r : rows) {
    std::printf("[backward rope power] pos=%-8lld %-24s %s error %.3g tol %.3g ratio %.3g\n",
                static_cast<long long>(r.position), r.variant.c_str(), r.correct ? "(correct)" : "         ", r.error,
                r.tolerance, r.ratio);
    if (r.correct) {
      EXPECT_LE(r.ratio, 1.0) << r.variant << " at position " << r.position << ": false alarm: " << r.worst;
    } else if (r.position <= 131072) {
      EXPECT_GT(r.ratio, 1.0) << r.variant << " at position " << r.position << " not detected: " << r.worst;
    } else {
      EXPECT_LE(r.ratio, 1.0) << r.variant << " at position " << r.position
                              << " is now detected: update docs/backward.md";
    }
  }
  EXPECT_EQ(rows.size(), 5u * 6u);
}
