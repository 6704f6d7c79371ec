// The feature table's promises: names round-trip (name -> parse_name -> the same problem) over generated and
// golden problems, parse_name rejects what it cannot read, the shared generator keeps SplitMix64's stream, and
// capability checks derived from the table report the first unsupported feature.
#include <gtest/gtest.h>

#include "attncheck/features.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/rng.hpp"
#include "attncheck/suite.hpp"
#include "case.hpp"

namespace attncheck {
namespace {

void expect_same(const Problem& a, const Problem& b, const std::string& name) {
  for (const Field& f : problem_fields())
    EXPECT_TRUE(field_equal(a, b, f)) << name << ": field " << f.key << " " << field_text(a, f) << " vs "
                                      << field_text(b, f);
}

TEST(Names, RoundTripOverPropertyDraws) {
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    prop::SeededChooser c(seed);
    prop::CaseSpec s = prop::draw_spec(c);
    prop::apply_budget(s, 20000);
    const Problem p = prop::build_case(s).p;
    const std::string n = p.name();
    const Problem q = parse_name(n);
    expect_same(p, q, n);
    EXPECT_EQ(q.name(), n);
  }
}

TEST(Names, RoundTripOverTheGoldenSuite) {
  const SuiteSpec suite = read_suite(ATTNCHECK_GOLDEN_SPEC);
  ASSERT_GT(suite.cases.size(), 100u);
  for (const CaseSpec& c : suite.cases) expect_same(c.problem, parse_name(c.problem.name()), c.problem.name());
}

TEST(Names, ShowValuesTheShortNameLoses) {
  Problem p;
  p.Lq = p.Lk = 5;
  p.softcap = 5.5;
  p.key_lengths = {3};
  p.scale = 0.1;
  EXPECT_EQ(p.name(), "fp32/B1-Hq1-Hkv1-Lq5-Lk5-D1/scale=0.1/softcap=5.5/key_lengths=3");
  EXPECT_EQ(p.short_name(), "fp32/B1-Hq1-Hkv1-Lq5-Lk5-D1/pad-softcap-scaled");
  EXPECT_EQ(Problem{}.name(), "fp32/B1-Hq1-Hkv1-Lq1-Lk1-D1/plain");
}

void expect_parse_error(const std::string& name, const std::string& needle) {
  try {
    parse_name(name);
    ADD_FAILURE() << name << ": no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Names, ParseErrorsNameTheComponent) {
  expect_parse_error("fp32/B1-Hq1", "expected <dtype>/<shape>");
  expect_parse_error("fp99/B1-Hq1-Hkv1-Lq1-Lk1-D1/plain", "fp99");
  expect_parse_error("fp32/B1-Hq1-Hkv1-Lq1-Lk1-X3/plain", "'X3'");
  expect_parse_error("fp32/B1-Hq1-Hkv1-Lq1-Lk1-D1/sofcap=3", "'sofcap'");
  expect_parse_error("fp32/B1-Hq1-Hkv1-Lq1-Lk1-D1/softcap=abc", "softcap");
  expect_parse_error("fp32/B1-Hq1-Hkv1-Lq1-Lk1-D1/softcap=-1", "softcap must be");  // validated
}

TEST(Rng, KeepsTheSplitMix64StreamOfTheGoldenGenerator) {
  // The stateful form the golden suite was generated with: state += gamma; mix(state).
  uint64_t state = 42;
  auto old_next = [&] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  Rng r(42);
  for (int n = 0; n < 100; ++n) ASSERT_EQ(r.next(), old_next()) << n;
}

TEST(Capabilities, DerivedCheckReportsTheFirstUnsupportedFeature) {
  Capabilities c;
  Problem p;
  p.softcap = 3;
  p.dropout_p = 0.5;
  EXPECT_TRUE(check_capabilities(c, p).ok);
  c.dropout = false;
  EXPECT_EQ(check_capabilities(c, p).reason, "dropout not supported");
  c.logit.erase("softcap");
  EXPECT_EQ(check_capabilities(c, p).reason, "softcap not supported");
  c.dtypes = {DType::f16};
  EXPECT_EQ(check_capabilities(c, p).reason, "dtype fp32 not supported");
}

TEST(Features, EveryBooleanCapabilityIsInTheTable) {
  // Turning every table flag off must make a problem using that feature unsupported: no flag is forgotten.
  int flags = 0;
  for (const Feature& f : problem_features())
    if (f.boolean()) {
      Capabilities c;
      f.declare(c, false);
      EXPECT_TRUE(std::string(f.allows(c, Problem{}).reason).find("not supported") != std::string::npos) << f.name;
      ++flags;
    }
  EXPECT_GE(flags, 14);
}

}  // namespace
}  // namespace attncheck
