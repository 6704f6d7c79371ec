// The accuracy profile (attncheck/accuracy.hpp) on values whose errors are known by construction: ulps of each
// dtype, the histogram's bins, the two biases, share of the bound, effective bits; and that verify's JSON report
// carries the profile under schema_version 2.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "attncheck/accuracy.hpp"
#include "cli_util.hpp"

namespace attncheck {
namespace {

TEST(Ulp, OfEachDtype) {
  EXPECT_EQ(ulp_of(DType::f32, 1.0), std::ldexp(1.0, -23));
  EXPECT_EQ(ulp_of(DType::f32, 1.99), std::ldexp(1.0, -23));
  EXPECT_EQ(ulp_of(DType::f32, -0.75), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp_of(DType::f32, 0.0), std::ldexp(1.0, -149));  // the subnormal spacing
  EXPECT_EQ(ulp_of(DType::f64, 1.0), std::ldexp(1.0, -52));
  EXPECT_EQ(ulp_of(DType::f16, 1.0), std::ldexp(1.0, -10));
  EXPECT_EQ(ulp_of(DType::f16, 1e-6), std::ldexp(1.0, -24));  // below fp16's smallest normal 2^-14
  EXPECT_EQ(ulp_of(DType::bf16, 3.0), std::ldexp(1.0, -6));
}

TEST(Profile, KnownErrors) {
  const double u = std::ldexp(1.0, -24);
  // errors of 0, +0.5, +1 (toward zero: expected is negative) and +3 ulps
  const std::vector<double> e{1.0, 2.0, -4.0, 0.5};
  const std::vector<double> a{1.0, 2.0 + 0.5 * 2 * 2 * u, -4.0 + 8 * u, 0.5 + 3 * u};
  const std::vector<double> tol(4, 32 * u);
  const Accuracy p = profile_accuracy(e, a, tol, DType::f32);
  ASSERT_TRUE(p.present);
  EXPECT_EQ(p.n, 4);
  EXPECT_EQ(p.ulp_hist, (std::array<int64_t, 6>{1, 1, 1, 0, 1, 0}));
  // sums of errors over sums of ulps (2, 4, 8, 1 units of 2^-24): (0 + 2 + 8 + 3) / 15, and with sign(expected)
  EXPECT_DOUBLE_EQ(p.bias_ulp, 13.0 / 15);
  EXPECT_DOUBLE_EQ(p.bias_mag_ulp, (2.0 - 8 + 3) / 15);
  EXPECT_DOUBLE_EQ(p.share, 8 * u / (32 * u));
  const double rms = std::sqrt((4.0 + 64 + 9) * u * u / (1 + 4 + 16 + 0.25));
  EXPECT_DOUBLE_EQ(p.rms_rel, rms);
  ASSERT_TRUE(p.effective_bits);
  EXPECT_DOUBLE_EQ(*p.effective_bits, -std::log2(rms));
}

TEST(Profile, TruncationIsHalfAnUlpTowardZeroAndRoundingIsUnbiased) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> n(0, 1);
  std::vector<double> e(20000), nearest(e.size()), trunc(e.size());
  for (size_t k = 0; k < e.size(); ++k) {
    e[k] = n(rng);
    const float f = static_cast<float>(e[k]);
    nearest[k] = f;
    trunc[k] = std::abs(static_cast<double>(f)) > std::abs(e[k]) ? std::nextafter(f, 0.0f) : f;
  }
  const std::vector<double> tol(e.size(), 1.0);
  const Accuracy r = profile_accuracy(e, nearest, tol, DType::f32), t = profile_accuracy(e, trunc, tol, DType::f32);
  EXPECT_NEAR(r.bias_mag_ulp, 0.0, 0.02);
  EXPECT_NEAR(t.bias_mag_ulp, -0.5, 0.02);
  EXPECT_NEAR(t.bias_ulp, 0.0, 0.05);  // signed values: truncation cancels in the plain mean, hence bias_mag_ulp
  EXPECT_EQ(r.ulp_hist[0] + r.ulp_hist[1], r.n);  // rounding to nearest: every error within half an ulp
  EXPECT_GT(t.ulp_hist[2], t.n / 3);              // truncation: many between half and one ulp
  // A correctly rounded fp32 result is consistent with about 24-25 bits, truncation with one bit less.
  EXPECT_GT(*r.effective_bits, 24.0);
  EXPECT_LT(*r.effective_bits, 26.0);
  EXPECT_NEAR(*r.effective_bits - *t.effective_bits, 1.0, 0.2);
}

TEST(Profile, NonFiniteAndSampledRowsAndExactResults) {
  const std::vector<double> e{1.0, NAN, 2.0, 3.0}, a{1.0, NAN, INFINITY, 3.5}, tol(4, 1e-3);
  Accuracy p = profile_accuracy(e, a, tol, DType::f32);
  EXPECT_EQ(p.n, 3);  // the NaN expected (matched in kind by the verdict) has no size
  EXPECT_EQ(p.n_nonfinite, 1);
  EXPECT_EQ(p.ulp_hist.back(), 2);  // the infinity and the 0.5 error
  EXPECT_TRUE(std::isinf(p.share));
  EXPECT_FALSE(p.effective_bits);
  const std::vector<char> rows{1, 0, 0, 1};  // only rows 0 and 3 judged
  p = profile_accuracy(e, a, tol, DType::f32, &rows, 1);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.n_nonfinite, 0);
  p = profile_accuracy({1.0, 2.0}, {1.0, 2.0}, {0.0, 0.0}, DType::f32);
  EXPECT_EQ(p.share, 0.0);
  EXPECT_EQ(p.rms_rel, 0.0);
  EXPECT_FALSE(p.effective_bits);  // exact: no finite precision to report
}

TEST(Profile, MergedProfilesAreThoseOfAllElementsTogether) {
  const double u = std::ldexp(1.0, -24);
  // KnownErrors' four elements in two comparisons: the merged figures are the same hand-computed ones.
  const Accuracy a = profile_accuracy({1.0, 2.0}, {1.0, 2.0 + 2 * u}, {32 * u, 32 * u}, DType::f32);
  const Accuracy b = profile_accuracy({-4.0, 0.5}, {-4.0 + 8 * u, 0.5 + 3 * u}, {32 * u, 32 * u}, DType::f32);
  Accuracy m;
  merge_accuracy(m, a);
  merge_accuracy(m, b);
  EXPECT_EQ(m.n, 4);
  EXPECT_EQ(m.ulp_hist, (std::array<int64_t, 6>{1, 1, 1, 0, 1, 0}));
  EXPECT_DOUBLE_EQ(m.bias_ulp, 13.0 / 15);
  EXPECT_DOUBLE_EQ(m.bias_mag_ulp, (2.0 - 8 + 3) / 15);
  EXPECT_DOUBLE_EQ(m.share, 8 * u / (32 * u));
  EXPECT_DOUBLE_EQ(m.rms_rel, std::sqrt((4.0 + 64 + 9) * u * u / (1 + 4 + 16 + 0.25)));
  merge_accuracy(m, Accuracy{});  // an empty profile changes nothing
  EXPECT_EQ(m.n, 4);
  // ulps of different dtypes do not add
  EXPECT_THROW(merge_accuracy(m, profile_accuracy({1.0}, {1.0}, {1.0}, DType::bf16)), std::invalid_argument);
}

TEST(Report, VerifyWritesTheProfileUnderSchema2) {
  const auto dir = test::scratch("accuracy_report");
  const std::string rep = (dir / "r.json").string();
  const auto r = test::run("verify --impl cpu --fixtures " + std::string(GOLDEN_DIR) +
                           "/cases --filter 'fp32/B2-Hq4-Hkv2-Lq13-Lk17-D16/causal-tl/normal' --report " + rep);
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream f(rep);
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["schema_version"], 2);
  const auto& c = j["cases"][0];
  EXPECT_EQ(c["dtype"], "fp32");
  EXPECT_NE(std::find(c["features"].begin(), c["features"].end(), "causal"), c["features"].end());
  const auto& out = c["tensors"][0];
  ASSERT_EQ(out["tensor"], "out");
  const auto& a = out["accuracy"];
  EXPECT_EQ(a["ulp_dtype"], "fp32");
  int64_t total = 0;
  for (const auto& [bin, count] : a["ulp_hist"].items()) total += count.get<int64_t>();
  EXPECT_EQ(total, out["n"].get<int64_t>());
  EXPECT_GT(a["rms_rel"].get<double>(), 0.0);
  EXPECT_LT(a["rms_rel"].get<double>(), 1e-5);  // an fp32 computation: a few ulps
  EXPECT_GT(a["share_of_bound"].get<double>(), 0.0);
  EXPECT_LE(a["share_of_bound"].get<double>(), 1.0);  // it passed
  EXPECT_GT(a["effective_bits"].get<double>(), 17.0);
}

TEST(Report, PropertyWritesTheProfileOfEachProperty) {
  const auto dir = test::scratch("accuracy_property_report");
  const std::string rep = (dir / "p.json").string();
  const auto r = test::run(
      "property --impl cpu --property agreement --property causality --cases 12 --no-fixture "
      "--report " +
      rep);
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream f(rep);
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["report"], "property");
  EXPECT_EQ(j["summary"]["pass"], 2);
  ASSERT_EQ(j["results"].size(), 2u);
  const auto& row = j["results"][0];
  EXPECT_EQ(row["impl"], "cpu");
  EXPECT_EQ(row["property"], "agreement");
  EXPECT_EQ(row["status"], "pass");
  int fp32_out = 0;
  for (const auto& a : row["accuracy"]) {
    int64_t total = 0;
    for (const auto& [bin, count] : a["ulp_hist"].items()) total += count.get<int64_t>();
    EXPECT_EQ(total, a["n"].get<int64_t>()) << a;
    EXPECT_LE(a["share_of_bound"].get<double>(), 1.0) << a;  // every merged case passed
    if (a["tensor"] == "out" && a["dtype"] == "fp32" && a["n"].get<int64_t>() > 0) {
      ++fp32_out;
      // fp32 work on small generated cases: more than half the significand, never beyond fp32's 24 bits + rounding
      EXPECT_GT(a["effective_bits"].get<double>(), 17.0) << a;
      EXPECT_LT(a["effective_bits"].get<double>(), 27.0) << a;
    }
  }
  EXPECT_EQ(fp32_out, 1) << row["accuracy"];
  // A report that is not JSON is refused before any work, naming the flag.
  const auto bad = test::run("property --impl cpu --cases 1 --report " + (dir / "p.xml").string());
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.out.find("--report"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace attncheck
