// Every long verb split over 4 shards and joined by `attncheck merge` gives the unsharded run's report and exit
// code (generate: the same files); `--shard auto` reads each scheduler's variables and names a bad one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_util.hpp"
#include "shard.hpp"

namespace fs = std::filesystem;
using attncheck::cli::parse_shard;
using attncheck::cli::Shard;
using attncheck::test::run;
using json = nlohmann::json;

namespace {

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Runs `verb_args` whole and as 4 shards (the report on stdout, or in --report FILE when `to_file`), merges the
// shards, and expects the merged report and exit code to be the whole run's; timings are left out.
void expect_merge_equals_whole(const std::string& tag, const std::string& verb_args, bool to_file) {
  const fs::path dir = attncheck::test::scratch("merge_" + tag);
  auto run_to = [&](const std::string& extra, const fs::path& out) {
    const auto r = to_file ? run(verb_args + extra + " --report " + out.string() + " >/dev/null")
                           : attncheck::test::run_shell("{ " + std::string(ATTNCHECK_EXE) + " " + verb_args + extra +
                                                        " >" + out.string() + "; }");
    return r.rc;
  };
  const int whole_rc = run_to("", dir / "whole.json");
  ASSERT_TRUE(whole_rc >= 0 && whole_rc <= 2) << tag << " exits " << whole_rc;
  std::string shards;
  for (int i = 0; i < 4; ++i) {
    const fs::path p = dir / ("shard" + std::to_string(i) + ".json");
    run_to(" --shard " + std::to_string(i) + "/4", p);
    EXPECT_EQ(read_json(p)["shard"]["index"], i) << tag;
    shards = p.string() + " " + shards;  // in any order
  }
  const auto m = run("merge " + shards + "--report " + (dir / "merged.json").string());
  EXPECT_EQ(m.rc, whole_rc) << tag << ": " << m.out;
  json whole = read_json(dir / "whole.json"), merged = read_json(dir / "merged.json");
  whole.erase("seconds"), merged.erase("seconds");
  EXPECT_EQ(merged, whole) << tag;
  // Byte for byte apart from the timing: the same indentation as the verb's own output.
  if (!read_json(dir / "whole.json").contains("seconds")) {
    EXPECT_EQ(slurp(dir / "merged.json"), slurp(dir / "whole.json")) << tag;
  }
}

}  // namespace

// Fixtures without checksums (a note in the report), a file that cannot be read (exit 2), and cases in a subfolder.
TEST(ShardMerge, Verify) {
  const fs::path dir = attncheck::test::scratch("merge_verify_fixtures");
  fs::create_directories(dir / "sub");
  for (const auto& e : fs::directory_iterator(std::string(GOLDEN_DIR) + "/regressions"))
    fs::copy_file(e.path(), dir / e.path().filename());
  int n = 0;
  for (const auto& e : fs::directory_iterator(std::string(GOLDEN_DIR) + "/cases"))
    if (e.path().filename().string().rfind("fp32_B1-Hq1-", 0) == 0 && n++ < 5)
      fs::copy_file(e.path(), dir / "sub" / e.path().filename());
  std::ofstream(dir / "sub" / "unreadable.h5") << "not HDF5";
  expect_merge_equals_whole("verify", "verify --impl reference --fixtures " + dir.string(), true);
}

TEST(ShardMerge, Property) {
  expect_merge_equals_whole("property", "property --impl reference cpu --cases 1 --no-fixture", true);
}

TEST(ShardMerge, Power) {
  expect_merge_equals_whole("power", "power --json --lk 1024 --rows 4 --dtype fp32 --logits normal,hazard", false);
}

TEST(ShardMerge, Selftest) {
  expect_merge_equals_whole("selftest", "selftest --json --cases 2 --property agreement", false);
}

TEST(ShardMerge, SelftestBackward) {
  expect_merge_equals_whole("selftest_backward", "selftest --json --pass backward --cases 3", false);
}

// generate has no report: the 4 shards write disjoint files, together byte-identical to the whole run's.
TEST(ShardMerge, Generate) {
  const fs::path dir = attncheck::test::scratch("merge_generate");
  const std::string base = "generate --spec " + std::string(GOLDEN_DIR) + "/suite.json --filter 'fp32_B1-Hq1-*' --out ";
  ASSERT_EQ(run(base + (dir / "whole").string()).rc, 0);
  for (int i = 0; i < 4; ++i) {
    const auto r = run(base + (dir / "sharded").string() + " --shard " + std::to_string(i) + "/4");
    EXPECT_EQ(r.rc, 0) << r.out;
  }
  std::map<std::string, std::string> whole, sharded;
  for (const auto& e : fs::recursive_directory_iterator(dir / "whole"))
    if (e.is_regular_file()) whole[fs::relative(e.path(), dir / "whole").string()] = slurp(e.path());
  for (const auto& e : fs::recursive_directory_iterator(dir / "sharded"))
    if (e.is_regular_file()) sharded[fs::relative(e.path(), dir / "sharded").string()] = slurp(e.path());
  EXPECT_GE(whole.size(), 4u);
  EXPECT_TRUE(whole == sharded) << whole.size() << " files whole, " << sharded.size() << " sharded";
}

TEST(ShardMerge, RefusesAnIncompleteOrMixedSet) {
  const fs::path dir = attncheck::test::scratch("merge_bad");
  const std::string args = std::string(ATTNCHECK_EXE) + " selftest --json --pass backward --cases 1 --shard ";
  for (int i = 0; i < 2; ++i)
    attncheck::test::run_shell("{ " + args + std::to_string(i) + "/2 >" +
                               (dir / (std::to_string(i) + ".json")).string() + "; }");
  auto r = run("merge " + (dir / "0.json").string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("shard 1/2 is missing"), std::string::npos) << r.out;
  r = run("merge " + (dir / "0.json").string() + " " + (dir / "0.json").string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("given twice"), std::string::npos) << r.out;
  std::ofstream(dir / "plain.json") << "{\"mutants\": 1}";
  r = run("merge " + (dir / "plain.json").string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("field 'shard' missing"), std::string::npos) << r.out;
}

namespace {
Shard from(const std::map<std::string, std::string>& env) {
  return parse_shard("auto", [&](const char* n) -> const char* {
    const auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}
std::string error_of(const std::map<std::string, std::string>& env) {
  try {
    from(env);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(ShardAuto, EachSchedulersVariables) {
  Shard s = from({{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_MIN", "4"}, {"SLURM_ARRAY_TASK_COUNT", "3"}});
  EXPECT_EQ(s.index, 1);
  EXPECT_EQ(s.count, 3);
  s = from({{"SLURM_ARRAY_TASK_ID", "6"}, {"SLURM_ARRAY_TASK_MIN", "4"}, {"SLURM_ARRAY_TASK_MAX", "7"}});
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 4);
  s = from({{"CI_NODE_INDEX", "1"}, {"CI_NODE_TOTAL", "4"}});  // GitLab counts from 1
  EXPECT_EQ(s.index, 0);
  EXPECT_EQ(s.count, 4);
  s = from({{"JOB_COMPLETION_INDEX", "7"}, {"ATTNCHECK_SHARD_COUNT", "8"}});
  EXPECT_EQ(s.index, 7);
  EXPECT_EQ(s.count, 8);
  s = from({{"ATTNCHECK_SHARD", "2/4"}, {"CI_NODE_INDEX", "1"}, {"CI_NODE_TOTAL", "4"}});  // explicit wins
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 4);
}

TEST(ShardAuto, BadValuesNameTheVariable) {
  EXPECT_NE(error_of({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}).find("SLURM_ARRAY_TASK_MIN="),
            std::string::npos);
  // --array=0-15:4: four tasks with ids 0, 4, 8, 12.
  EXPECT_NE(error_of({{"SLURM_ARRAY_TASK_ID", "4"},
                      {"SLURM_ARRAY_TASK_MIN", "0"},
                      {"SLURM_ARRAY_TASK_MAX", "12"},
                      {"SLURM_ARRAY_TASK_COUNT", "4"}})
                .find("not consecutive"),
            std::string::npos);
  EXPECT_NE(error_of({{"CI_NODE_INDEX", "0"}, {"CI_NODE_TOTAL", "4"}}).find("CI_NODE_INDEX=0"), std::string::npos);
  EXPECT_NE(error_of({{"CI_NODE_INDEX", "5"}, {"CI_NODE_TOTAL", "4"}}).find("CI_NODE_INDEX=5, CI_NODE_TOTAL=4"),
            std::string::npos);
  EXPECT_NE(error_of({{"JOB_COMPLETION_INDEX", "x"}, {"ATTNCHECK_SHARD_COUNT", "2"}}).find("JOB_COMPLETION_INDEX=x"),
            std::string::npos);
  EXPECT_NE(error_of({{"ATTNCHECK_SHARD", "1/0"}}).find("'1/0' from ATTNCHECK_SHARD"), std::string::npos);
  EXPECT_NE(error_of({}).find("no scheduler's shard variables are set"), std::string::npos);
}

// `--shard auto` end to end: each long verb, under another scheduler's variables (any of them already set in the
// test's environment removed), does the work of the shard they name: its report (generate: its files) equals the
// run with that shard given as I/N, and the run's first line names the variables read.
TEST(ShardAuto, EveryLongVerbTakesItsShardFromTheScheduler) {
  const fs::path dir = attncheck::test::scratch("shard_auto");
  const std::string clean =
      "env -u ATTNCHECK_SHARD -u ATTNCHECK_SHARD_COUNT -u SLURM_ARRAY_TASK_ID -u SLURM_ARRAY_TASK_MIN "
      "-u SLURM_ARRAY_TASK_MAX -u SLURM_ARRAY_TASK_COUNT -u CI_NODE_INDEX -u CI_NODE_TOTAL -u JOB_COMPLETION_INDEX ";
  struct Verb {
    std::string name, env, shard, source, args;  // args: REPORT stands for the report's path
  };
  const std::string golden = GOLDEN_DIR;
  const std::vector<Verb> verbs = {
      {"verify", "SLURM_ARRAY_TASK_ID=5 SLURM_ARRAY_TASK_MIN=4 SLURM_ARRAY_TASK_COUNT=4", "1/4",
       "SLURM_ARRAY_TASK_ID, _MIN, _COUNT",
       "verify --impl reference --fixtures " + golden + "/regressions --report REPORT"},
      {"property", "JOB_COMPLETION_INDEX=2 ATTNCHECK_SHARD_COUNT=4", "2/4",
       "JOB_COMPLETION_INDEX, ATTNCHECK_SHARD_COUNT",
       "property --impl reference --cases 1 --no-fixture --report REPORT"},
      {"power", "CI_NODE_INDEX=4 CI_NODE_TOTAL=4", "3/4", "CI_NODE_INDEX, CI_NODE_TOTAL",
       "power --json --lk 1024 --rows 4 --dtype fp32 --logits normal,hazard >REPORT"},
      {"selftest", "ATTNCHECK_SHARD=1/4", "1/4", "ATTNCHECK_SHARD",  // a GitHub Actions matrix (docs/sharding.md)
       "selftest --json --cases 1 --property agreement >REPORT"},
  };
  for (const Verb& v : verbs) {
    auto with = [&](const std::string& file) {
      std::string a = v.args;
      a.replace(a.find("REPORT"), 6, (dir / file).string());
      return a;
    };
    // In braces: a report on stdout goes to its file, the shard's line on stderr to the output read here.
    const auto a = attncheck::test::run_shell("{ " + clean + v.env + " " + ATTNCHECK_EXE + " " +
                                              with(v.name + "_auto.json") + " --shard auto; }");
    const auto e = attncheck::test::run_shell("{ " + std::string(ATTNCHECK_EXE) + " " + with(v.name + "_given.json") +
                                              " --shard " + v.shard + "; }");
    EXPECT_EQ(a.rc, e.rc) << v.name << ": " << a.out;
    EXPECT_NE(a.out.find("shard " + v.shard + " (" + v.source + "): "), std::string::npos) << v.name << ": " << a.out;
    json auto_report = read_json(dir / (v.name + "_auto.json")), given = read_json(dir / (v.name + "_given.json"));
    auto_report.erase("seconds"), given.erase("seconds");
    EXPECT_EQ(auto_report, given) << v.name;
    EXPECT_EQ(auto_report["shard"]["index"], std::stoi(v.shard)) << v.name;
  }
  // generate: a Slurm array 1-4 (SLURM_ARRAY_TASK_MAX, no _COUNT); task 3 builds the files of shard 2/4.
  const std::string gen = "generate --spec " + golden + "/suite.json --filter 'fp32_B1-Hq1-*' --out ";
  const auto a =
      attncheck::test::run_shell(clean + "SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=4 " +
                                 ATTNCHECK_EXE + " " + gen + (dir / "gen_auto").string() + " --shard auto");
  ASSERT_EQ(a.rc, 0) << a.out;
  EXPECT_NE(a.out.find("shard 2/4 (SLURM_ARRAY_TASK_ID, _MIN, _MAX): "), std::string::npos) << a.out;
  ASSERT_EQ(run(gen + (dir / "gen_given").string() + " --shard 2/4").rc, 0);
  std::map<std::string, std::string> from_auto, given;
  for (const auto& e : fs::recursive_directory_iterator(dir / "gen_auto"))
    if (e.is_regular_file()) from_auto[fs::relative(e.path(), dir / "gen_auto").string()] = slurp(e.path());
  for (const auto& e : fs::recursive_directory_iterator(dir / "gen_given"))
    if (e.is_regular_file()) given[fs::relative(e.path(), dir / "gen_given").string()] = slurp(e.path());
  EXPECT_FALSE(given.empty());
  EXPECT_TRUE(from_auto == given) << from_auto.size() << " files from auto, " << given.size() << " given";
}

// An unknown --property names the known ones (the hint pointed at an option that does not exist).
TEST(PropertyOption, UnknownNameListsTheKnownOnes) {
  for (const char* verb : {"property --impl reference", "selftest"}) {
    const auto r = run(std::string(verb) + " --property no-such-property");
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("unknown property 'no-such-property' (known: agreement, "), std::string::npos) << r.out;
  }
}
