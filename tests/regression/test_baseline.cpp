// Baseline comparison (harness/baseline) on synthetic reports whose outcome is known: the t quantiles against
// published table values, each kind of case change, the group statistic's decisions (growth, bias, improvement,
// too few cases), per-dtype thresholds, and reading schema 1 and malformed reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "baseline.hpp"

namespace attncheck::baseline {
namespace {

TEST(Stats, TQuantilesMatchTables) {
  EXPECT_NEAR(t_quantile(0.95, 10), 2.228139, 1e-5);
  EXPECT_NEAR(t_quantile(0.99, 5), 4.032143, 1e-5);
  EXPECT_NEAR(t_quantile(0.99, 30), 2.749996, 1e-5);
  EXPECT_NEAR(t_quantile(0.95, 1), 12.7062, 1e-3);
  EXPECT_THROW(t_quantile(1.0, 3), std::invalid_argument);
}

TEST(Stats, MeanInterval) {
  const Interval i = mean_interval({1, 2, 3, 4}, 0.95);  // mean 2.5, s = 1.29099, t(0.95, 3) = 3.182446
  EXPECT_DOUBLE_EQ(i.estimate, 2.5);
  EXPECT_NEAR(i.hi - i.estimate, 3.182446 * 1.290994 / 2, 1e-5);
}

// A pass row with one out tensor of the given RMS error and bias (fp32 ulps).
Row pass(const std::string& fixture, double rms, double bias = 0, const std::string& dtype = "fp32") {
  Row r{fixture, "k", "pass", dtype, {"causal"}, {}};
  r.tensors.push_back({"out", true, rms, 0.1, bias, rms, std::ldexp(1.0, -24)});
  return r;
}
Report report(std::vector<Row> rows) {
  Report r;
  r.schema_version = 2, r.origin = "r.json", r.rows = std::move(rows);
  return r;
}
const GroupDrift* group(const Comparison& c, const std::string& feature) {
  for (const auto& g : c.groups)
    if (g.feature == feature && g.tensor == "out") return &g;
  return nullptr;
}

TEST(Compare, CaseChanges) {
  // g: outside a finite-required contract now, which verify does not count as a failure: the case is lost to the
  // judging, not failed.
  Report before = report({pass("a", 1e-7),
                          pass("b", 1e-7),
                          {"c", "k", "unsupported", "fp32", {}, {}},
                          pass("d", 1e-7),
                          {"e", "k", "fail", "fp32", {}, {}},
                          pass("f", 1e-7),
                          pass("g", 1e-7)});
  Report now = report({{"a", "k", "fail", "fp32", {}, {}},
                       {"b", "k", "unsupported", "fp32", {}, {}},
                       pass("c", 1e-7),
                       pass("e", 1e-7),
                       pass("f", 1e-7),
                       {"g", "k", "finite-required", "fp32", {}, {}}});  // d missing
  const Comparison c = compare_reports(before, now, {});
  std::map<std::string, std::string> kind;
  for (const auto& ch : c.changes) kind[ch.fixture] = ch.kind;
  EXPECT_EQ(kind["a"], "new-failure");
  EXPECT_EQ(kind["b"], "capability-loss");
  EXPECT_EQ(kind["c"], "capability-gain");
  EXPECT_EQ(kind["d"], "capability-loss");
  EXPECT_EQ(kind["e"], "fixed");
  EXPECT_EQ(kind.count("f"), 0u);
  EXPECT_EQ(kind["g"], "capability-loss");
  EXPECT_EQ(c.regressions(), 4);
}

TEST(Compare, GrowthBiasImprovementAndTooFewCases) {
  std::vector<Row> b, worse, better, biased;
  for (int k = 0; k < 10; ++k) {
    const double e = 1e-7 * (1 + 0.1 * k), jitter = 1 + 0.05 * ((k % 3) - 1);
    b.push_back(pass(std::to_string(k), e));
    worse.push_back(pass(std::to_string(k), 3 * e * jitter));
    better.push_back(pass(std::to_string(k), e / 3 * jitter));
    biased.push_back(pass(std::to_string(k), e * jitter, -0.5 + 0.01 * k));
  }
  Comparison c = compare_reports(report(b), report(worse), {});
  ASSERT_TRUE(group(c, "all"));
  EXPECT_TRUE(group(c, "all")->growth_regression);
  EXPECT_NEAR(group(c, "all")->growth.estimate, 3, 0.1);
  EXPECT_TRUE(group(c, "causal")->growth_regression);
  c = compare_reports(report(b), report(better), {});
  EXPECT_FALSE(group(c, "all")->growth_regression);
  EXPECT_TRUE(group(c, "all")->improvement);  // reported, never a failure
  EXPECT_EQ(c.regressions(), 0);
  c = compare_reports(report(b), report(biased), {});
  EXPECT_FALSE(group(c, "all")->growth_regression);
  EXPECT_TRUE(group(c, "all")->bias_regression);
  c = compare_reports(report(biased), report(b), {});  // the bias going back to zero is an improvement
  EXPECT_FALSE(group(c, "all")->bias_regression);
  EXPECT_TRUE(group(c, "all")->improvement);
  Thresholds few;
  few.min_cases = 11;
  c = compare_reports(report(b), report(worse), few);
  EXPECT_FALSE(group(c, "all")->judged);
  EXPECT_EQ(c.regressions(), 0);
  Thresholds loose;
  loose.max_growth_by_dtype["fp32"] = 4;
  EXPECT_EQ(compare_reports(report(b), report(worse), loose).regressions(), 0);
}

TEST(Compare, NoiseAroundOneIsQuiet) {
  std::vector<Row> b, n;
  for (int k = 0; k < 40; ++k) {
    b.push_back(pass(std::to_string(k), 1e-7));
    n.push_back(pass(std::to_string(k), 1e-7 * std::exp(0.4 * std::sin(k * 1.7))));  // +-50% per case, mean ~1
  }
  EXPECT_EQ(compare_reports(report(b), report(n), {}).regressions(), 0);
}

TEST(Read, SchemaOneAndMalformed) {
  const std::string v1 = R"({"cases":[{"fixture":"fp16/B1/causal-tl/normal","file":"x.h5","impl":"cpu","status":"pass",
      "message":"","tensors":[{"tensor":"out","max_abs_err":0.001}]}],"summary":{},"tol_scale":1})";
  const Report r = parse_report(v1, "old.json");
  EXPECT_EQ(r.schema_version, 1);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].dtype, "fp16");
  EXPECT_FALSE(r.rows[0].tensors[0].has_accuracy);
  EXPECT_EQ(r.rows[0].tensors[0].max_abs_err, 0.001);
  const Comparison c = compare_reports(r, r, {});
  EXPECT_EQ(c.regressions(), 0);
  EXPECT_NE(c.notes.back().find("schema 1"), std::string::npos);
  try {
    parse_report(R"({"schema_version":99,"cases":[]})", "new.json");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("new.json: schema_version 99"), std::string::npos) << e.what();
  }
  try {
    parse_report(R"({"cases":[{"fixture":"a","status":"pass"}]})", "bad.json");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json: cases[0]: field 'impl' is missing"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_report("[1,2]", "x.json"), std::invalid_argument);
  // Shares of the bound depend on --tol-scale: comparing runs at different scales says so.
  const Report scaled = parse_report(R"({"schema_version":2,"tol_scale":0.5,"cases":[]})", "s.json");
  EXPECT_EQ(scaled.tol_scale, 0.5);
  const auto notes = compare_reports(r, scaled, {}).notes;
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("--tol-scale differs (1 before, 0.5 now)") != std::string::npos;
  }));
}

}  // namespace
}  // namespace attncheck::baseline
