// The backward selftest: every backward mutant of the real bug list is killed by the gradient comparison on the
// generated cases, and the correct flash-style variant passes all of them (no false alarm).
#include <gtest/gtest.h>

#include "backward_mutants.hpp"

using namespace attncheck::mutants;

TEST(BackwardSelftest, EveryMutantKilledNoFalseAlarm) {
  const auto results = run_backward_selftest(60);
  ASSERT_EQ(results.size(), all_backward_faults().size() + 1);
  for (const auto& r : results) {
    std::cout << "[backward selftest] " << r.name << (r.correct ? " (correct)" : "") << ": "
              << (r.killed ? "killed: " + r.first_failure : "survived") << ", " << r.ran << " cases, max ratio "
              << r.max_ratio << "\n";
    EXPECT_GE(r.ran, 1) << r.name;
    if (r.correct)
      EXPECT_FALSE(r.killed) << r.name << ": false alarm: " << r.first_failure;
    else
      EXPECT_TRUE(r.killed) << r.name << " survived " << r.ran << " cases";
  }
}
