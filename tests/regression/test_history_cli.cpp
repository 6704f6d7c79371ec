// The CI outputs from a series of three reports of one test kernel (drift-wide: base, fp32 working precision, a lost
// causal feature judged at --tol-scale 0.05 so that it also fails): the PR summary (file and
// $GITHUB_STEP_SUMMARY), JUnit entries for regressions, --accept-baseline, and the history CSV and PNG, whose
// pixels are checked where the documented layout puts each point and mark. Expected values come from the
// reports' JSON, read here independently of harness/baseline.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli_util.hpp"
#include "history.hpp"

namespace attncheck {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Series {
  fs::path dir;
  std::string r1, r2, r3;
};

const Series& series() {
  static const Series s = [] {
    ::unsetenv("GITHUB_STEP_SUMMARY");  // the planted regressions stay out of a CI job's summary
    Series x;
    x.dir = test::scratch("history");
    const std::string v =
        "verify --impl drift-wide --fixtures " + std::string(GOLDEN_DIR) + "/cases --filter 'fp32/*' ";
    x.r1 = (x.dir / "r1.json").string(), x.r2 = (x.dir / "r2.json").string(), x.r3 = (x.dir / "r3.json").string();
    EXPECT_EQ(test::run(v + "--plugin " DRIFT_WIDE " --report " + x.r1).rc, 0);
    EXPECT_EQ(test::run(v + "--plugin " DRIFT_WIDE_FP32 " --report " + x.r2).rc, 0);
    EXPECT_EQ(test::run(v + "--plugin " DRIFT_WIDE_NOCAUSAL " --tol-scale 0.05 --report " + x.r3).rc, 1);
    return x;
  }();
  return s;
}

TEST(Summary, MarkdownAndJUnitForRegressions) {
  const Series& s = series();
  const fs::path md = s.dir / "s.md", xml = s.dir / "j.xml", gh = s.dir / "gh.md";
  auto r = test::run_shell("GITHUB_STEP_SUMMARY=" + gh.string() + " " + ATTNCHECK_EXE + " compare-reports " + s.r1 +
                           " " + s.r2 + " --summary " + md.string() + " --junit " + xml.string());
  ASSERT_EQ(r.rc, 1) << r.out;
  const std::string m = slurp(md);
  EXPECT_NE(m.find("### attncheck: "), std::string::npos) << m;
  EXPECT_NE(m.find("| drift-wide fp32 all out | 48 |"), std::string::npos) << m;
  EXPECT_NE(m.find(":x: less accurate"), std::string::npos) << m;
  EXPECT_NE(slurp(gh).find(m), std::string::npos);  // the same text appended to the step summary
  const std::string j = slurp(xml);
  EXPECT_NE(j.find("name=\"accuracy drift-wide fp32 all out\">\n      <failure type=\"accuracy\""), std::string::npos)
      << j;
  // The lost feature: one :x: row and one JUnit failure per causal case (counted from the reports).
  r = test::run(std::string("compare-reports ") + s.r2 + " " + s.r1 + " --summary " + md.string() + " --junit " +
                xml.string());
  EXPECT_EQ(r.rc, 0) << r.out;  // r1 is more accurate than r2: an improvement, never a failure
  EXPECT_NE(slurp(md).find("more accurate"), std::string::npos);
  r = test::run(std::string("compare-reports ") + s.r1 + " " + s.r3 + " --min-cases 1000 --summary " + md.string() +
                " --junit " + xml.string());
  EXPECT_EQ(r.rc, 1) << r.out;
  std::ifstream f1(s.r1), f3(s.r3);
  const json j1 = json::parse(f1), j3 = json::parse(f3);
  std::set<std::string> judged;
  for (const auto& c : j1["cases"])
    if (c["status"] == "pass" || c["status"] == "fail") judged.insert(c["fixture"].get<std::string>());
  int lost = 0;
  for (const auto& c : j3["cases"])
    lost += c["status"] == "unsupported" && judged.count(c["fixture"].get<std::string>());
  ASSERT_GT(lost, 0);
  const std::string mj = slurp(md), jj = slurp(xml);
  size_t n_md = 0, n_xml = 0;
  for (size_t p = 0; (p = mj.find(":x: capability-loss", p)) != std::string::npos; ++p) ++n_md;
  for (size_t p = 0; (p = jj.find("type=\"capability-loss\"", p)) != std::string::npos; ++p) ++n_xml;
  EXPECT_EQ(static_cast<int>(n_md), lost);
  EXPECT_EQ(static_cast<int>(n_xml), lost);
}

TEST(Summary, AcceptBaselineMakesTheRunTheBaseline) {
  const Series& s = series();
  const fs::path base = s.dir / "accepted.json";
  fs::copy_file(s.r1, base, fs::copy_options::overwrite_existing);
  const std::string v = "verify --impl drift-wide --fixtures " + std::string(GOLDEN_DIR) +
                        "/cases --filter 'fp32/*' --plugin " + DRIFT_WIDE_FP32 + " --baseline " + base.string();
  EXPECT_EQ(test::run(v).rc, 1);
  const auto r = test::run(v + " --accept-baseline");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("REGRESSION accuracy drift-wide fp32 all out"), std::string::npos);  // still shown
  EXPECT_EQ(test::run(v).rc, 0);
}

TEST(History, CsvAndPngFromThreeReports) {
  const Series& s = series();
  const fs::path png = s.dir / "h.png", csv = s.dir / "h.csv";
  const auto r = test::run("history " + s.r1 + " " + s.r2 + " " + s.r3 + " --labels base,fp32,nocausal --png " +
                           png.string() + " --csv " + csv.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  // Expected per report: mean share_of_bound of the pass cases' out, failures, causal cases lost.
  std::vector<double> share;
  std::vector<int> fails;
  for (const auto& path : {s.r1, s.r2, s.r3}) {
    std::ifstream f(path);
    const json j = json::parse(f);
    double sum = 0;
    int n = 0, bad = 0;
    for (const auto& c : j["cases"]) {
      bad += c["status"] == "fail";
      if (c["status"] != "pass") continue;
      sum += c["tensors"][0]["accuracy"]["share_of_bound"].get<double>(), ++n;
    }
    share.push_back(sum / n), fails.push_back(bad);
  }
  EXPECT_LT(share[0], share[1]);
  EXPECT_GT(fails[2], 0);
  std::istringstream lines(slurp(csv));
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "label,group,share_of_bound,cases,failures,capability_lost,capability_gained");
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(std::getline(lines, line));
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    ASSERT_EQ(f.size(), 7u) << line;
    const std::string labels[] = {"base", "fp32", "nocausal"};
    EXPECT_EQ(f[0], labels[k]);
    EXPECT_EQ(f[1], "drift-wide fp32 out");
    EXPECT_NEAR(std::stod(f[2]), share[static_cast<size_t>(k)], 1e-5 * share[static_cast<size_t>(k)]);
    EXPECT_EQ(std::stoi(f[4]), fails[static_cast<size_t>(k)]);
    EXPECT_EQ(std::stoi(f[5]) > 0, k == 2);  // causal lost in the third report only
  }
  const Image img = read_png(png.string());
  using L = baseline::ChartLayout;
  EXPECT_EQ(img.width, L::width);
  const Rgb line_colour = baseline::palette(0), red{220, 20, 20}, orange{240, 140, 0}, white{255, 255, 255};
  for (int k = 0; k < 3; ++k) {
    const int x = L::x_of(k, 3), y = L::y_of(share[static_cast<size_t>(k)]);
    EXPECT_EQ(img.at(x, y), line_colour) << "point " << k;
    EXPECT_EQ(img.at(x - 5, y) == red, k == 2) << "failure frame " << k;
    EXPECT_EQ(img.at(x, y - 10) == orange, k == 2) << "capability mark " << k;
  }
  EXPECT_EQ(img.at(L::x_of(0, 3) + 5, L::top + 5), white);  // empty plot area stays empty
  int drawn = 0;
  for (int y = L::top; y < L::bottom; ++y)
    for (int x = L::left; x < L::right; ++x) drawn += img.at(x, y) == line_colour;
  EXPECT_GT(drawn, (L::x_of(2, 3) - L::x_of(0, 3)) * 2);  // the line joins the points
}

}  // namespace
}  // namespace attncheck
