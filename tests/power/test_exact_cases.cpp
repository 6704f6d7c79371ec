// Exact cases (docs/tolerance.md "Exact cases"): golden fixtures whose answer is representable in
// the output dtype carry exact_out and are judged for equality, so a 1-ulp difference fails where the bound alone
// admits it; a false exactness claim is refused when a case is built and when a file is read.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "attncheck/fixture.hpp"
#include "attncheck/suite.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {
namespace {

std::vector<Fixture> exact_fixtures() {
  std::vector<Fixture> out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(GOLDEN_DIR) + "/cases"))
    if (e.path().extension() == ".h5") {
      Fixture f = read_fixture(e.path().string());
      if (f.tolerance.exact_out) out.push_back(std::move(f));
    }
  return out;
}

// The expected answer as the candidate delivers it (representable, so exact), in the problem's dtype.
Outputs delivered(const Fixture& f) {
  const Problem& p = f.problem;
  Outputs o;
  o.out = Tensor(p.dtype, {p.B, p.Hq, p.Lq, p.Dv});
  for (size_t n = 0; n < f.expected.out.size(); ++n) o.out.set_offset(static_cast<int64_t>(n), f.expected.out[n]);
  if (p.want_lse) {
    o.lse = Tensor(DType::f32, {p.B, p.Hq, p.Lq});
    for (size_t n = 0; n < f.expected.lse.size(); ++n) o.lse->set_offset(static_cast<int64_t>(n), f.expected.lse[n]);
  }
  if (p.want_weights) {
    o.weights = Tensor(DType::f32, {p.B, p.Hq, p.Lq, p.Lk});
    for (size_t n = 0; n < f.expected.weights.size(); ++n)
      o.weights->set_offset(static_cast<int64_t>(n), f.expected.weights[n]);
  }
  return o;
}

// x moved by one unit in the last place of dtype t, away from zero.
double one_ulp_more(DType t, double x) {
  const int mant = t == DType::f16 ? 10 : t == DType::bf16 ? 7 : t == DType::f32 ? 23 : 52;
  return x + std::copysign(std::ldexp(1.0, std::ilogb(x) - mant), x);
}

TEST(ExactCases, TheSuiteHoldsOneVisibleKeyAndUniformRowsInEveryLowPrecisionDtype) {
  std::set<std::string> kinds;
  std::set<DType> dtypes;
  for (const auto& f : exact_fixtures()) {
    kinds.insert(f.provenance.distribution);
    dtypes.insert(f.problem.dtype);
    EXPECT_NO_THROW(check_exact_out(f)) << f.name;
  }
  EXPECT_TRUE(kinds.count("normal") && kinds.count("uniform_rows")) << "one-visible-key and uniform_rows cases";
  EXPECT_TRUE(dtypes.count(DType::f32) && dtypes.count(DType::f16) && dtypes.count(DType::bf16));
}

TEST(ExactCases, TheExactAnswerPassesAndOneUlpOffFailsNamingExactness) {
  const std::vector<Fixture> fs = exact_fixtures();
  ASSERT_GE(fs.size(), 7u);
  int admitted_by_bound = 0;
  for (const auto& f : fs) {
    const Outputs exact = delivered(f);
    const Verdict ok = judge(f.problem, f.expected, exact, f.tolerance);
    EXPECT_TRUE(ok.pass) << f.name << ": " << ok.worst().describe();
    for (int64_t n : {int64_t{0}, exact.out.numel() / 2, exact.out.numel() - 1}) {
      Outputs off = delivered(f);
      off.out.set_offset(n, one_ulp_more(f.problem.dtype, exact.out.get_offset(n)));
      ASSERT_NE(off.out.get_offset(n), exact.out.get_offset(n)) << f.name;
      const Verdict bad = judge(f.problem, f.expected, off, f.tolerance);
      EXPECT_FALSE(bad.pass) << f.name << " element " << n;
      EXPECT_EQ(bad.worst().tensor, "out") << f.name;
      EXPECT_EQ(bad.worst().dominant, kExactDominant) << f.name;
      EXPECT_NE(bad.worst().describe().find("exact case"), std::string::npos) << bad.worst().describe();
      ToleranceModel bound = f.tolerance;
      bound.exact_out = false;
      admitted_by_bound += judge(f.problem, f.expected, off, bound).pass;
    }
  }
  // The flag is what catches it: the derived bound alone admits a 1-ulp difference in most of these cases.
  EXPECT_GT(admitted_by_bound, 0);
}

Problem small(DType t) {
  Problem p;
  p.B = 1, p.Hq = 2, p.Hkv = 1, p.Lq = 5, p.Lk = 64, p.Dqk = 16, p.Dv = 8, p.dtype = t, p.want_lse = true;
  return p;
}

CaseSpec exact_case(DType t, gen::Distribution d) {
  CaseSpec c;
  c.name = "test/exact";
  c.problem = small(t);
  c.distribution = d;
  c.seed = 3;
  c.exact_out = true;
  return c;
}

TEST(ExactCases, AFalseClaimIsRefusedWhenBuilt) {
  // Rows of 64 keys with distinct scores: the answer is not representable, and many keys are no exact case.
  EXPECT_THROW(build_case(exact_case(DType::f16, gen::Distribution::normal), "t.json"), std::invalid_argument);
  // Uniform rows in fp32: exact only without a split-K merge, so not claimed.
  try {
    build_case(exact_case(DType::f32, gen::Distribution::uniform_rows), "t.json");
    ADD_FAILURE() << "fp32 uniform rows accepted as exact";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("exact_out: row 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fp16/bf16"), std::string::npos) << e.what();
  }
  CaseSpec drop = exact_case(DType::bf16, gen::Distribution::uniform_rows);
  drop.problem.dropout_p = 0.25, drop.problem.dropout_seed = 1;
  EXPECT_THROW(build_case(drop, "t.json"), std::invalid_argument);
  EXPECT_NO_THROW(build_case(exact_case(DType::bf16, gen::Distribution::uniform_rows), "t.json"));
}

TEST(ExactCases, AFalseClaimInAFileIsRefusedWhenRead) {
  CaseSpec c = exact_case(DType::bf16, gen::Distribution::normal);
  c.exact_out = false;
  Fixture f = build_case(c, "t.json");
  f.tolerance.exact_out = true;  // as a hand edit would
  const auto path = std::filesystem::temp_directory_path() / "attncheck_false_exact.h5";
  write_fixture(path.string(), f);
  try {
    read_fixture(path.string());
    ADD_FAILURE() << "a false exact_out was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("exact_out: row 0"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace attncheck
