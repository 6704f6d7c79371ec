// The golden suite against the mutant catalogue (harness/mutants): every mutant fails at least one fixture of
// golden/cases and every correct variant passes all of them. Prints fixtures failed per mutant; the table in
// docs/tolerance.md compares suites by pointing ATTNCHECK_GOLDEN_CASES at another golden/cases directory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "attncheck/fixture.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/tolerance.hpp"
#include "mutants.hpp"

namespace attncheck {
namespace {

TEST(SuiteKills, EveryMutantFailsAGoldenFixtureAndNoCorrectVariantDoes) {
  const char* env = std::getenv("ATTNCHECK_GOLDEN_CASES");
  const std::string dir = env ? env : std::string(GOLDEN_DIR) + "/cases";
  std::vector<Fixture> fixtures;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".h5") fixtures.push_back(read_fixture(e.path().string()));
  ASSERT_GT(fixtures.size(), 100u) << dir;
  for (const auto& m : mutants::catalogue()) {
    int ran = 0, failed = 0;
    for (const auto& f : fixtures) {
      Outputs out;
      if (!run_impl(*m.impl, f.problem, f.inputs, out).ok) continue;
      ++ran;
      const Verdict v = judge(f.problem, f.expected, out, f.tolerance);  // exact cases judged for equality
      failed += !v.pass;
      if (m.correct && !v.pass) std::cout << "  " << f.name << ": " << v.worst().describe() << "\n";
    }
    std::cout << "[kills] " << m.impl->name() << (m.correct ? " (correct)" : "") << ": fails " << failed << " of "
              << ran << " fixtures\n";
    if (m.correct)
      EXPECT_EQ(failed, 0) << m.impl->name();
    else
      EXPECT_GT(failed, 0) << m.impl->name() << " survives the golden suite";
  }
}

}  // namespace
}  // namespace attncheck
