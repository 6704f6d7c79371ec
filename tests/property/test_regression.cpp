// Failures become fixtures: a property run against a mutant must fail, shrink, and write a regression fixture that
// reads back with the shrunk inputs, the failing implementation in its provenance, and on which the reference
// passes and the mutant still fails (so `attncheck verify --fixtures` replays the bug).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "attncheck/fixture.hpp"
#include "attncheck/tolerance.hpp"
#include "mutants.hpp"
#include "rc_runner.hpp"

using namespace attncheck;
using namespace attncheck::prop;

namespace {

ImplPtr mutant(const std::string& name) {
  for (const auto& e : mutants::catalogue())
    if (e.impl->name() == name) return e.impl;
  return nullptr;
}

// Without ATTNCHECK_REGRESSIONS_DIR, shrunk failures go to the working directory, never into the source tree
// (golden/regressions is replayed by every later run: a stray failure there would be picked up as a fixture).
TEST(Regression, DefaultDirectoryIsOutsideTheSourceTree) {
  const char* before = std::getenv("ATTNCHECK_REGRESSIONS_DIR");
  const std::string saved = before ? before : "";
  ::unsetenv("ATTNCHECK_REGRESSIONS_DIR");
  const std::string dir = regressions_dir();
  if (before) ::setenv("ATTNCHECK_REGRESSIONS_DIR", saved.c_str(), 1);
  EXPECT_EQ(dir, "attncheck-regressions");
  EXPECT_EQ(dir.find("golden"), std::string::npos) << dir;
}

TEST(Regression, ShrunkFailureBecomesReplayableFixture) {
  const auto dir = std::filesystem::temp_directory_path() / ("attncheck_regressions_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ::setenv("ATTNCHECK_REGRESSIONS_DIR", dir.c_str(), 1);
  const ImplPtr bad = mutant("causal-off-by-one");
  ASSERT_TRUE(bad);
  rc::detail::TestParams params;
  params.seed = 12345;
  params.maxSuccess = 200;
  const RcRun r = rc_run(*find_property("agreement"), *bad, params, 40000);
  ::unsetenv("ATTNCHECK_REGRESSIONS_DIR");

  ASSERT_TRUE(r.failed) << "the causal off-by-one mutant survived 200 agreement cases";
  std::cout << "shrunk failure: " << r.message << "fixture: " << r.fixture << "\n";
  EXPECT_NE(r.message.find("expected"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("tol"), std::string::npos) << r.message;
  ASSERT_TRUE(r.shrunk);
  EXPECT_TRUE(r.shrunk->p.causal) << "the shrunk case keeps what the bug needs: " << r.shrunk->spec.str();
  EXPECT_EQ(r.shrunk->p.B, 1) << "shrinking reduces the batch: " << r.shrunk->spec.str();
  ASSERT_FALSE(r.fixture.empty());
  ASSERT_TRUE(std::filesystem::exists(r.fixture)) << r.fixture;

  const Fixture f = read_fixture(r.fixture);
  EXPECT_EQ(f.name.rfind("regression/agreement/causal-off-by-one/", 0), 0u) << f.name;
  EXPECT_NE(f.provenance.command.find("causal-off-by-one"), std::string::npos);
  EXPECT_EQ(f.problem.name(), r.shrunk->p.name());
  EXPECT_EQ(f.provenance.seed, r.shrunk->spec.seed);

  Outputs out;
  ASSERT_TRUE(run_impl(*find_impl("reference"), f.problem, f.inputs, out).ok);
  EXPECT_TRUE(judge(f.problem, f.expected, out).pass) << "the reference passes its own fixture";
  ASSERT_TRUE(run_impl(*bad, f.problem, f.inputs, out).ok);
  const Verdict v = judge(f.problem, f.expected, out);
  EXPECT_FALSE(v.pass) << "the replayed fixture still catches the mutant";
  std::filesystem::remove_all(dir);
}

}  // namespace
