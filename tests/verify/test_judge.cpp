// The judging library called directly, without the CLI: cases found under a fixture directory, narrowed by a
// filter and by shards, and judged against a correct variant (must pass) and a mutant (must fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cases.hpp"
#include "judge.hpp"
#include "mutants.hpp"
#include "status.hpp"

namespace {

using namespace attncheck;

ImplPtr catalogued(const std::string& name) {
  for (const auto& e : mutants::catalogue())
    if (e.impl->name() == name) return e.impl;
  throw std::logic_error("no catalogue entry " + name);
}

verify::Selection golden_cases(const std::string& filter) {
  verify::Selection s;
  s.fixtures = GOLDEN_DIR "/cases";
  s.filter = filter;
  return s;
}

TEST(Judge, ACorrectVariantPassesAndAMutantFails) {
  verify::Cases cases = verify::find_cases(golden_cases("fp32_B1-Hq1-Hkv1-Lq129-Lk127-D4_plain_normal.h5"));
  ASSERT_EQ(cases.list.size(), 1u);
  std::vector<std::string> shown;
  verify::Observer seen;
  seen.row = [&](const verify::CaseResult& r, const std::vector<std::string>&) { shown.push_back(r.impl); };
  const verify::Judged j =
      verify::judge_cases(cases, {catalogued("ok-online-block7"), catalogued("wrong-scale")}, verify::Judging{}, seen);
  ASSERT_EQ(j.rows.size(), 2u);
  EXPECT_EQ(j.rows[0].status, verify::Status::pass) << j.rows[0].message;
  EXPECT_TRUE(j.rows[0].judged);
  EXPECT_EQ(j.rows[1].status, verify::Status::fail) << j.rows[1].message;
  EXPECT_TRUE(j.rows[1].judged);
  EXPECT_NE(j.rows[1].message.find("out"), std::string::npos) << j.rows[1].message;  // the failing tensor named
  EXPECT_EQ(j.rows[0].dtype, "fp32");
  EXPECT_EQ(shown, (std::vector<std::string>{"ok-online-block7", "wrong-scale"}));  // each row shown as judged
}

TEST(Judge, TheDiagnosisOfAFailureComesWithItsRow) {
  verify::Cases cases = verify::find_cases(golden_cases("fp32_B1-Hq1-Hkv1-Lq129-Lk127-D4_plain_normal.h5"));
  verify::Judging how;
  how.diagnose = true;
  std::vector<std::string> lines;
  verify::Observer seen;
  seen.row = [&](const verify::CaseResult&, const std::vector<std::string>& l) { lines = l; };
  const verify::Judged j = verify::judge_cases(cases, {catalogued("wrong-scale")}, how, seen);
  ASSERT_EQ(j.rows.size(), 1u);
  EXPECT_EQ(j.rows[0].status, verify::Status::fail);
  EXPECT_FALSE(j.rows[0].diagnosis_json.empty());
  EXPECT_FALSE(lines.empty());
}

TEST(Cases, ShardsSplitTheFilteredCasesWithoutOverlap) {
  const verify::Cases all = verify::find_cases(golden_cases("fp32_*"));
  ASSERT_GT(all.list.size(), 3u);
  std::vector<size_t> units;
  for (int64_t i = 0; i < 3; ++i) {
    verify::Selection s = golden_cases("fp32_*");
    s.shard = verify::Shard{i, 3, "test"};
    for (const verify::Case& c : verify::find_cases(s).list) {
      EXPECT_EQ(static_cast<int64_t>(c.unit % 3), i);
      EXPECT_EQ(all.list[c.unit].file, c.file);
      units.push_back(c.unit);
    }
  }
  std::sort(units.begin(), units.end());
  ASSERT_EQ(units.size(), all.list.size());
  for (size_t k = 0; k < units.size(); ++k) EXPECT_EQ(units[k], k);
}

TEST(Cases, AFilterThatMatchesNothingNamesTheOption) {
  try {
    verify::find_cases(golden_cases("no-such-case*"));
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--filter: 'no-such-case*'"), std::string::npos) << e.what();
  }
}

TEST(Status, EveryStatusHasOneSpellingInReportOrder) {
  const std::vector<std::string> spelled = {
      "pass",    "fail",    "unsupported", "unavailable",    "finite-required", "error",
      "crashed", "timeout", "exited",      "modified-input", "out-of-bounds",   "input-error"};
  ASSERT_EQ(verify::all_statuses().size(), spelled.size());
  for (size_t k = 0; k < spelled.size(); ++k) {
    EXPECT_EQ(verify::to_string(verify::all_statuses()[k]), spelled[k]);
    EXPECT_EQ(verify::status_from_string(spelled[k]), verify::all_statuses()[k]);
  }
  EXPECT_FALSE(verify::status_from_string("PASS"));
  EXPECT_FALSE(verify::is_failure(verify::Status::unsupported));
  EXPECT_TRUE(verify::is_failure(verify::Status::input_error));
}

}  // namespace
