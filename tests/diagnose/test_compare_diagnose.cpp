// `compare --diagnose`: a candidate file written by the buggy example plugin (a wrong softmax denominator) is
// diagnosed from its outputs alone (no probes, said so); with the plugin given the probes re-run it and --repro
// writes a small fixture; --repro without a re-runnable candidate is exit 2; a named implementation that passes the
// case is not taken for the candidate.
#include <gtest/gtest.h>

#include <filesystem>

#include "attncheck/fixture.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/plugin_loader.hpp"
#include "cli_util.hpp"

using namespace attncheck;

TEST(CompareDiagnose, CandidateFileDiagnosedAloneAndWithItsPluginReRun) {
  const std::string fix = test::golden_case("fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_causal-tl_normal.h5");
  const Fixture f = read_fixture(fix);
  const ImplPtr buggy = load_plugin(BUGGY_PLUGIN);
  Outputs out;
  ASSERT_TRUE(run_impl(*buggy, f.problem, f.inputs, out).ok);
  const auto dir = test::scratch("compare_diagnose");
  const std::string cand = (dir / "buggy.h5").string();
  write_candidate(cand, f.problem, out);
  const std::string base = "compare --expected " + fix + " --actual " + cand + " --diagnose";

  auto r = test::run(base);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("diagnosis: row-scale\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no re-runnable candidate"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("  probe "), std::string::npos) << r.out;

  r = test::run(base + " --plugin " + BUGGY_PLUGIN);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("diagnosis: row-scale\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  probe causal removed: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  re-runs: "), std::string::npos) << r.out;

  const std::string repro = (dir / "repro").string();
  r = test::run(base + " --plugin " + BUGGY_PLUGIN + " --repro " + repro);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("still row-scale"), std::string::npos) << r.out;
  int written = 0;
  for (const auto& e : std::filesystem::directory_iterator(repro)) written += e.path().extension() == ".h5";
  EXPECT_EQ(written, 1) << r.out;

  r = test::run(base + " --repro " + repro);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--repro: needs a candidate that can be re-run"), std::string::npos) << r.out;

  r = test::run(base + " --candidate cpu");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("cpu re-run passes the case the file fails"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("  probe "), std::string::npos) << r.out;

  r = test::run("compare --expected " + fix + " --actual " + cand + " --repro " + repro);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--repro: needs --diagnose"), std::string::npos) << r.out;
}

// `inspect --actual` on a failing candidate file shows its diagnosis from the outputs (the same diagnoser as compare;
// nothing re-run); a passing candidate gets none.
TEST(CompareDiagnose, InspectShowsTheDiagnosisOfAFailingCandidate) {
  const std::string fix = test::golden_case("fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_causal-tl_normal.h5");
  const Fixture f = read_fixture(fix);
  const auto dir = test::scratch("inspect_diagnose");
  Outputs out;
  ASSERT_TRUE(run_impl(*load_plugin(BUGGY_PLUGIN), f.problem, f.inputs, out).ok);
  const std::string bad = (dir / "buggy.h5").string();
  write_candidate(bad, f.problem, out);
  auto r = test::run("inspect " + fix + " --actual " + bad);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("  diagnosis: row-scale\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    anatomy: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    cause row-scale (score "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("  probe "), std::string::npos) << r.out;

  Outputs good;
  ASSERT_TRUE(run_impl(*find_impl("cpu"), f.problem, f.inputs, good).ok);
  const std::string ok = (dir / "cpu.h5").string();
  write_candidate(ok, f.problem, good);
  r = test::run("inspect " + fix + " --actual " + ok);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("diagnosis"), std::string::npos) << r.out;
}
