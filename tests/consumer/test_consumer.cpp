// A user's GoogleTest against the installed attncheck: the reference on a case with a known answer, the tolerance
// model rejecting a perturbed output, fixture I/O (a round trip and a checked-in golden fixture), and the plugin
// loader.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "attncheck/fixture.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

using namespace attncheck;

namespace {
// q = 0 makes every score 0, so each row's weights are uniform and out is the mean of the value rows.
Problem small_case(Inputs& in) {
  Problem p;
  p.dtype = DType::f32;
  p.Lq = 2;
  p.Lk = 4;
  p.Dqk = 3;
  p.Dv = 2;
  in = Inputs{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  for (int j = 0; j < 4; ++j) {
    for (int d = 0; d < 3; ++d) in.k.put(0, 0, j, d, 0.25 * (j - d));
    in.v.put(0, 0, j, 0, j + 1.0);   // 1 2 3 4 -> mean 2.5
    in.v.put(0, 0, j, 1, -2.0 * j);  // 0 -2 -4 -6 -> mean -3
  }
  return p;
}

Outputs as_outputs(const Problem& p, const ExpectedAttention& r) {
  Outputs o = make_outputs(p);
  for (int64_t i = 0, n = 0; i < p.Lq; ++i)
    for (int64_t d = 0; d < p.Dv; ++d) o.out.put(0, 0, i, d, r.out[static_cast<size_t>(n++)]);
  return o;
}
}  // namespace

TEST(Consumer, ReferenceGivesTheMeanOfValuesForUniformWeights) {
  Inputs in;
  const Problem p = small_case(in);
  const ExpectedAttention r = expected_attention(p, in);
  for (int i = 0; i < 2; ++i) {
    EXPECT_DOUBLE_EQ(r.out[static_cast<size_t>(i * 2 + 0)], 2.5);
    EXPECT_DOUBLE_EQ(r.out[static_cast<size_t>(i * 2 + 1)], -3.0);
  }
}

TEST(Consumer, ToleranceModelAcceptsExactAndRejectsPerturbed) {
  Inputs in;
  const Problem p = small_case(in);
  const ExpectedAttention r = expected_attention(p, in);
  Outputs o = as_outputs(p, r);
  EXPECT_TRUE(judge(p, r, o).pass);
  o.out.put(0, 0, 1, 0, 2.5 * (1 + 1e-3));  // far beyond fp32 roundoff
  const Verdict v = judge(p, r, o);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.worst().worst[2], 1) << v.worst().describe();
}

TEST(Consumer, FixtureRoundTrip) {
  Inputs in;
  const Problem p = small_case(in);
  const std::string path = ::testing::TempDir() + "consumer_fixture.h5";
  write_fixture(path, make_fixture("consumer/uniform", p, in, Provenance{}));
  const Fixture f = read_fixture(path);
  EXPECT_EQ(f.name, "consumer/uniform");
  EXPECT_EQ(f.expected.out[0], 2.5);
  std::remove(path.c_str());
}

TEST(Consumer, ReadsAGoldenFixture) {
  const std::string path = GOLDEN_FIXTURE;
  ASSERT_FALSE(path.empty()) << "no golden fixture given (GOLDEN_FIXTURE: tests/CMakeLists.txt globs golden/cases)";
  const Fixture f = read_fixture(path);
  // The fixture's expected outputs are the reference's on its stored inputs: recompute and compare.
  const ExpectedAttention r = expected_attention(f.problem, f.inputs);
  ASSERT_EQ(r.out.size(), f.expected.out.size());
  const TensorVerdict v = compare_values("out", {f.problem.B, f.problem.Hq, f.problem.Lq, f.problem.Dv}, f.expected.out,
                                         r.out, out_tolerance(f.problem, r));
  EXPECT_TRUE(v.pass) << path << ": " << v.describe();
}

TEST(Consumer, LoadsThePluginExample) {
  const std::string path = EXAMPLE_PLUGIN;
  ASSERT_FALSE(path.empty()) << "no plugin given (EXAMPLE_PLUGIN)";
  const ImplPtr impl = load_plugin(path);
  Inputs in;
  const Problem p = small_case(in);
  Outputs o;
  ASSERT_TRUE(run_impl(*impl, p, in, o).ok);
  EXPECT_TRUE(judge(p, expected_attention(p, in), o).pass);
}
