// The CLI's contract on the checked-in suite: compare returns 0 on the exact expected output and 1 on a perturbed
// one; verify passes the reference, fails a wrong expectation, writes JSON / JUnit reports that parse, and its
// shards partition the suite; usage errors exit 2; generate refuses to change a golden file without --update.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "attncheck/fixture.hpp"
#include "attncheck/suite.hpp"
#include "cli_util.hpp"

namespace attncheck {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::run;

// The expected values as a candidate would hold them: out in the fixture's layout, lse and weights.
Outputs expected_as_outputs(const Fixture& f, DType dt) {
  const Problem& p = f.problem;
  Outputs o;
  o.out = Tensor(dt, {p.B, p.Hq, p.Lq, p.Dv}, storage_order(p.layout));
  size_t n = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d) o.out.put(b, h, i, d, f.expected.out[n++]);
  o.lse = Tensor(DType::f64, {p.B, p.Hq, p.Lq});
  for (int64_t k = 0; k < o.lse->numel(); ++k) o.lse->set_offset(k, f.expected.lse[static_cast<size_t>(k)]);
  return o;
}

json read_json(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

class Compare : public ::testing::TestWithParam<std::string> {};

TEST_P(Compare, ExactPassesPerturbedFails) {
  const std::string fix = test::golden_case(GetParam());
  const Fixture f = read_fixture(fix);
  const fs::path dir = test::scratch("compare");
  Outputs o = expected_as_outputs(f, DType::f64);
  write_candidate((dir / "exact.h5").string(), f.problem, o);
  auto r = run("compare --expected " + fix + " --actual " + (dir / "exact.h5").string());
  EXPECT_EQ(r.rc, 0) << r.out;

  // One element off by 20 tolerances: must fail and name that element.
  const std::vector<double> tol = out_tolerance(f.problem, f.expected, f.tolerance);
  const int64_t b = f.problem.B - 1, h = f.problem.Hq - 1, i = f.problem.Lq / 2, d = f.problem.Dv - 1;
  const size_t n = static_cast<size_t>(((b * f.problem.Hq + h) * f.problem.Lq + i) * f.problem.Dv + d);
  ASSERT_TRUE(std::isfinite(f.expected.out[n]));
  o.out.put(b, h, i, d, f.expected.out[n] + 20 * tol[n]);
  write_candidate((dir / "perturbed.h5").string(), f.problem, o);
  r = run("compare --expected " + fix + " --actual " + (dir / "perturbed.h5").string() + " --report " +
          (dir / "r.json").string());
  EXPECT_EQ(r.rc, 1) << r.out;
  const std::string where = "out[b=" + std::to_string(b) + ",h=" + std::to_string(h) + ",i=" + std::to_string(i) +
                            ",d=" + std::to_string(d) + "]";
  EXPECT_NE(r.out.find(where), std::string::npos) << r.out;
  const json j = read_json(dir / "r.json");
  EXPECT_EQ(j["summary"]["fail"], 1);
  EXPECT_EQ(j["cases"][0]["status"], "fail");
  EXPECT_EQ(j["cases"][0]["worst_index"]["i"], i);

  // inspect: the fixture's summary, and with the candidate its verdict and the perturbed element listed first.
  r = run("inspect " + fix + " --actual " + (dir / "perturbed.h5").string());
  EXPECT_EQ(r.rc, 1) << r.out;
  const std::vector<std::string> lines = {
      "case        " + f.name, "provenance  schema_version " + std::to_string(kFixtureSchemaVersion),
      "tolerance   lambda", "candidate   " + (dir / "perturbed.h5").string() + ": FAIL",
      "worst out elements (error / tolerance):\n    " + where};
  for (const std::string& s : lines) EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  r = run("inspect " + fix + " --actual " + (dir / "exact.h5").string());
  EXPECT_EQ(r.rc, 0) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Golden, Compare,
                         ::testing::Values("fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5",
                                           "bf16_B2-Hq4-Hkv4-Lq13-Lk17-D16_bshd_normal.h5",
                                           "fp16_B2-Hq4-Hkv2-Lq13-Lk17-D16_causal-br-pad_large_logits.h5"));

TEST(CompareTest, HalfPrecisionCandidateOfTheExpectedValuesPasses) {
  // What a real fp16 implementation at best produces: the expected values rounded to fp16.
  const std::string fix = test::golden_case("fp16_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5");
  const Fixture f = read_fixture(fix);
  const fs::path dir = test::scratch("compare_half");
  write_candidate((dir / "half.h5").string(), f.problem, expected_as_outputs(f, DType::f16));
  const auto r = run("compare --expected " + fix + " --actual " + (dir / "half.h5").string());
  EXPECT_EQ(r.rc, 0) << r.out;
}

TEST(Verify, ReferencePassesTheWholeSuiteAndReportsParse) {
  const fs::path dir = test::scratch("verify");
  auto r = run("verify --impl reference --fixtures " + std::string(GOLDEN_DIR) + "/cases --report " +
               (dir / "r.json").string());
  ASSERT_EQ(r.rc, 0) << r.out;
  const json j = read_json(dir / "r.json");
  EXPECT_GE(j["cases"].size(), 60u);
  EXPECT_EQ(j["summary"]["pass"], j["cases"].size());
  EXPECT_EQ(j["summary"]["fail"], 0);
  for (const auto& c : j["cases"])
    for (const char* k : {"fixture", "impl", "status", "max_abs_err", "max_rel_err", "tolerance", "worst_index",
                          "expected", "actual", "message"})
      EXPECT_TRUE(c.contains(k)) << k;
  r = run("verify --impl reference --fixtures " + std::string(GOLDEN_DIR) + "/cases --filter 'bf16/*' --report " +
          (dir / "r.xml").string());
  ASSERT_EQ(r.rc, 0) << r.out;
  // python3 is a bootstrap dependency (python3-h5py): without it the XML check is a failure, not a skip.
  ASSERT_EQ(std::system("/usr/bin/python3 -c 'import xml' 2>/dev/null"), 0) << "/usr/bin/python3 is missing";
  const std::string py = "/usr/bin/python3 -c \"import xml.etree.ElementTree as E, sys; r = E.parse('" +
                         (dir / "r.xml").string() +
                         "').getroot(); cs = r.findall('.//testcase'); sys.exit(0 if r.tag == 'testsuites' and "
                         "len(cs) == int(r.get('tests')) and len(cs) > 10 and r.get('failures') == '0' else 1)\"";
  EXPECT_EQ(std::system(py.c_str()), 0) << "JUnit XML does not parse or has wrong counts";
}

TEST(Verify, AWrongExpectationFails) {
  // A fixture whose stored expectation is off by 1e-3 in one element: the reference must now fail on it.
  Fixture f = read_fixture(test::golden_case("fp64_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5"));
  f.expected.out[5] += 1e-3;
  const fs::path dir = test::scratch("verify_wrong");
  write_fixture((dir / "wrong.h5").string(), f);
  const auto r = run("verify --impl reference --fixtures " + dir.string() + " --report " + (dir / "r.xml").string());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("out[b=0,h=0,i=0,d=5]"), std::string::npos) << r.out;
  std::ifstream x(dir / "r.xml");
  const std::string xml{std::istreambuf_iterator<char>(x), {}};
  EXPECT_NE(xml.find("<failure message="), std::string::npos) << xml;
}

TEST(Verify, ShardsPartitionTheSuite) {
  const fs::path dir = test::scratch("shards");
  auto names = [&](const std::string& extra, const std::string& tag) {
    const auto r = run("verify --impl reference --fixtures " + std::string(GOLDEN_DIR) + "/cases " + extra +
                       " --report " + (dir / (tag + ".json")).string());
    EXPECT_EQ(r.rc, 0) << r.out;
    std::multiset<std::string> s;
    const json j = read_json(dir / (tag + ".json"));
    for (const auto& c : j["cases"]) s.insert(c["fixture"].get<std::string>());
    return s;
  };
  const auto all = names("", "all");
  std::multiset<std::string> united;
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);  // appended: GCC 12 warns falsely (-Wrestrict) on "literal" + string
    const auto part = names(std::string("--shard ").append(n) + "/3", std::string("s").append(n));
    EXPECT_GT(part.size(), 0u);
    united.insert(part.begin(), part.end());
  }
  EXPECT_EQ(united, all);  // a multiset: no fixture in two shards, none missing
  // --shard auto: the same partition from a Slurm array --array=4-6 and from GitLab's parallel: 3 (1-based), on
  // the fp32 cases (the partition is the same rule; fewer runs under the sanitizers).
  const auto fp32 = names("--filter 'fp32/*'", "fp32");
  for (const char* scheduler : {"slurm", "gitlab"}) {
    std::multiset<std::string> by_env;
    for (int i = 0; i < 3; ++i) {
      const std::string n = std::to_string(i), tag = std::string(scheduler).append(n);
      const std::string env = std::string(scheduler) == "slurm"
                                  ? std::string("SLURM_ARRAY_TASK_MIN=4 SLURM_ARRAY_TASK_COUNT=3 SLURM_ARRAY_TASK_ID=")
                                        .append(std::to_string(4 + i))
                                  : std::string("CI_NODE_TOTAL=3 CI_NODE_INDEX=").append(std::to_string(1 + i));
      const auto r =
          test::run_shell("env " + env + " " + ATTNCHECK_EXE + " verify --impl reference --fixtures " + GOLDEN_DIR +
                          "/cases --filter 'fp32/*' --shard auto --report " + (dir / (tag + ".json")).string());
      EXPECT_EQ(r.rc, 0) << r.out;
      EXPECT_NE(r.out.find("shard " + n + "/3 ("), std::string::npos) << r.out;
      const json j = read_json(dir / (tag + ".json"));
      for (const auto& c : j["cases"]) by_env.insert(c["fixture"].get<std::string>());
    }
    EXPECT_EQ(by_env, fp32) << scheduler;
  }
}

TEST(Verify, ShardAutoWithoutAScheduler) {
  const std::string base =
      std::string(ATTNCHECK_EXE) + " verify --impl reference --fixtures " + GOLDEN_DIR + "/cases --shard auto";
  const std::string none = "env -u ATTNCHECK_SHARD -u SLURM_ARRAY_TASK_ID -u CI_NODE_INDEX ";
  auto r = test::run_shell(none + "-u JOB_COMPLETION_INDEX " + base);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--shard: auto: no scheduler's shard variables are set (looked for ATTNCHECK_SHARD, "
                       "SLURM_ARRAY_TASK_ID, CI_NODE_INDEX and JOB_COMPLETION_INDEX"),
            std::string::npos)
      << r.out;
  r = test::run_shell(none + "JOB_COMPLETION_INDEX=1 " + base);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("ATTNCHECK_SHARD_COUNT is not: set it to the job's spec.completions"), std::string::npos)
      << r.out;
  r = test::run_shell("env -u SLURM_ARRAY_TASK_ID ATTNCHECK_SHARD=4/4 " + base);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("got '4/4' from ATTNCHECK_SHARD"), std::string::npos) << r.out;
}

TEST(Verify, FilterTakesAPastedCaseNameAndExclusions) {
  const std::string base = "verify --impl reference --fixtures " + std::string(GOLDEN_DIR) + "/cases --filter ";
  // A full case name contains '-': it must select exactly that case (GoogleTest would split it at the '-').
  auto r = run(base + "'fp16/B2-Hq4-Hkv2-Lq13-Lk17-D16/causal-br/normal'");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("1 results: pass 1 "), std::string::npos) << r.out;
  r = run(base + "'fp16/*causal*:-*large_logits*:-*poison*'");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("fp16/B2-Hq4-Hkv2-Lq13-Lk17-D16/causal-br/normal"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("large_logits"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("poison"), std::string::npos) << r.out;
  r = run(base + "'-fp*'");
  EXPECT_EQ(r.rc, 0) << r.out;  // only exclusions: the bf16 cases remain
  EXPECT_EQ(r.out.find("fp16/"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bf16/"), std::string::npos) << r.out;
}

TEST(Verify, UsageErrorsExit2) {
  const std::string base = "verify --fixtures " + std::string(GOLDEN_DIR) + "/cases";
  auto r = run(base + " --impl no-such-impl");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("--impl: unknown implementation 'no-such-impl'"), std::string::npos) << r.out;
  r = run(base + " --filter 'nothing*matches'");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("--filter"), std::string::npos) << r.out;
  r = run(base + " --shard 3/3");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("--shard"), std::string::npos) << r.out;
  r = run(base + " --report out.txt");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("--report"), std::string::npos) << r.out;
  r = run("verify --fixtures /nonexistent/dir");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("--fixtures: '/nonexistent/dir' is not a directory"), std::string::npos) << r.out;
  r = run("verify --fixtures " + test::scratch("empty").string());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("no *.h5 fixtures"), std::string::npos) << r.out;
  r = run("compare --expected x.h5");
  EXPECT_EQ(r.rc, 2) << r.out;
}

TEST(Generate, ChangingAGoldenFileNeedsUpdateAndPrintsTheDifference) {
  const fs::path dir = test::scratch("generate");
  auto spec = [&](int seed) {
    std::ofstream(dir / "s.json") << R"({"schema_version": 1, "subdir": "c", "cases": [{"Lq": 3, "Lk": 5, "D": 4,
        "dtype": "fp32", "seed": )"
                                  << seed << "}]}";
  };
  const std::string cmd = "generate --spec " + (dir / "s.json").string() + " --out " + dir.string();
  spec(1);
  auto r = run(cmd);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("1 new"), std::string::npos) << r.out;
  const fs::path file = dir / "c" / "fp32_B1-Hq1-Hkv1-Lq3-Lk5-D4_plain_normal.h5";
  const auto before = fs::file_size(file);
  r = run(cmd);
  EXPECT_NE(r.out.find("1 unchanged"), std::string::npos) << r.out;
  spec(2);  // other values: the file would change
  r = run(cmd);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("DIFFERS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expected out max |diff|"), std::string::npos) << r.out;
  const std::string name = read_fixture(file.string()).name;
  EXPECT_EQ(read_fixture(file.string()).provenance.seed, case_seed(1, name));  // untouched
  r = run(cmd + " --update");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("updated"), std::string::npos) << r.out;
  EXPECT_EQ(read_fixture(file.string()).provenance.seed, case_seed(2, name));
  EXPECT_EQ(fs::file_size(file), before);
  int others = 0;
  for (const auto& e : fs::directory_iterator(dir / "c")) others += e.path() != file;
  EXPECT_EQ(others, 0) << "temporary files left behind";
}

TEST(Generate, BadSpecExits2NamingTheCaseAndField) {
  const fs::path dir = test::scratch("badspec");
  std::ofstream(dir / "s.json") << R"({"schema_version": 1, "cases": [{"Lq": 3}, {"Hq": 4, "Hkv": 3}]})";
  auto r = run("generate --spec " + (dir / "s.json").string() + " --out " + dir.string());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("cases[1]: Hq must be a multiple of Hkv"), std::string::npos) << r.out;
  std::ofstream(dir / "t.json") << R"({"schema_version": 1, "cases": [{"casual": true}]})";
  r = run("generate --spec " + (dir / "t.json").string() + " --out " + dir.string());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("cases[0]: unknown key 'casual'"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace attncheck
