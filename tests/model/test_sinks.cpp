// Attention sinks (Problem::sinks): the reference against values worked out by hand, rows that keep only their
// sink, validation, names, cpu and cpu-flash against the reference (dense rows, decode key splits, finite fill),
// and the plugin route: a plugin that declares "sinks" gets them through the extension chain, a v1 plugin never.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attncheck/backward.hpp"
#include "attncheck/generate.hpp"
#include "impl_check.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One query, two keys, D = 1, scale 1: scores 0 and log 2, so the key terms are 1 and 2 (relative to max 0).
Problem tiny() {
  Problem p;
  p.dtype = DType::f64;
  p.Hq = 2, p.Lk = 2, p.scale = 1.0, p.want_weights = p.want_lse = true;
  p.sinks = {std::log(3.0), -kInf};  // head 0: a sink term of 3; head 1: no sink
  return p;
}
Inputs tiny_inputs(const Problem& p) {
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  for (int64_t h = 0; h < p.Hq; ++h) in.q.put(0, h, 0, 0, 1.0);
  in.k.put(0, 0, 0, 0, 0.0), in.k.put(0, 0, 1, 0, std::log(2.0));
  in.v.put(0, 0, 0, 0, 6.0), in.v.put(0, 0, 1, 0, -12.0);
  return in;
}

TEST(Sinks, ReferenceWorkedByHand) {
  const Problem p = tiny();
  const ExpectedAttention r = expected_attention(p, tiny_inputs(p));
  // Head 0: weights 1/6 and 2/6 (the sink takes 3/6), out 6/6 - 24/6 = -3, lse log 6.
  EXPECT_NEAR(r.weights[0], 1.0 / 6, 1e-15);
  EXPECT_NEAR(r.weights[1], 2.0 / 6, 1e-15);
  EXPECT_NEAR(r.out[0], -3.0, 1e-14);
  EXPECT_NEAR(r.lse[0], std::log(6.0), 1e-15);
  // Head 1 (sink -inf): the plain softmax, weights 1/3 and 2/3, out 2 - 8 = -6, lse log 3.
  EXPECT_NEAR(r.weights[2], 1.0 / 3, 1e-15);
  EXPECT_NEAR(r.out[1], -6.0, 1e-14);
  EXPECT_NEAR(r.lse[1], std::log(3.0), 1e-15);
}

TEST(Sinks, RowWithoutKeysKeepsItsSink) {
  Problem p = tiny();
  p.key_lengths = {0};
  p.fully_masked = FullyMasked::nan;  // not applied to head 0: its softmax still has the sink
  const ExpectedAttention r = expected_attention(p, tiny_inputs(p));
  EXPECT_EQ(r.weights[0], 0.0);
  EXPECT_EQ(r.out[0], 0.0);
  EXPECT_EQ(r.lse[0], std::log(3.0));
  EXPECT_TRUE(std::isnan(r.out[1])) << "head 1 has no sink: the nan policy applies";
}

TEST(Sinks, Validation) {
  Problem p = tiny();
  p.sinks = {0.5};
  EXPECT_THROW(
      try { validate(p); } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("sinks must have Hq=2 entries"), std::string::npos) << e.what();
        throw;
      },
      std::invalid_argument);
  for (double bad : {std::nan(""), kInf}) {
    p.sinks = {0.0, bad};
    try {
      validate(p);
      ADD_FAILURE() << "sink " << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("sinks must be finite or -inf"), std::string::npos) << e.what();
    }
  }
}

TEST(Sinks, NamesRoundTrip) {
  const Problem p = tiny();
  EXPECT_NE(p.name().find("/sinks=1.0986122886681098,-inf"), std::string::npos) << p.name();
  EXPECT_EQ(parse_name(p.name()).name(), p.name());
  EXPECT_EQ(parse_name(p.name()).sinks, p.sinks);
  EXPECT_NE(p.short_name().find("sinks"), std::string::npos);
}

// Problems that exercise every path of the CPU implementations: dense rows, decode (key splits merged by lse),
// rows with no visible key, a finite fill, GQA, bf16.
std::vector<Problem> cpu_problems() {
  std::vector<Problem> v;
  auto make = [&](DType t, int64_t B, int64_t Lq, int64_t Lk, auto&& tweak) {
    Problem p;
    p.dtype = t, p.B = B, p.Hq = 4, p.Hkv = 2, p.Lq = Lq, p.Lk = Lk, p.Dqk = p.Dv = 16;
    p.want_lse = true, p.want_weights = Lq * Lk <= 4096;
    p.sinks = {0.75, -kInf, 6.0, -2.5};
    tweak(p);
    v.push_back(p);
  };
  make(DType::f32, 2, 37, 53, [](Problem&) {});
  make(DType::f64, 2, 37, 53, [](Problem& p) { p.causal = true, p.alignment = Alignment::bottom_right; });
  make(DType::f32, 1, 1, 700, [](Problem& p) { p.want_weights = false; });  // decode: keys split and merged
  make(DType::bf16, 2, 9, 300, [](Problem& p) { p.key_lengths = {0, 200}, p.fully_masked = FullyMasked::nan; });
  make(DType::f16, 2, 13, 17, [](Problem& p) {
    p.fill = MaskFill::finite, p.fill_value = -1e4, p.key_lengths = {0, 5}, p.fully_masked = FullyMasked::uniform;
  });
  return v;
}

TEST(Sinks, CpuImplementationsMatchTheReference) {
  expect_impls_match_reference(cpu_problems(), [](Problem p) {
    p.sinks.clear();  // without the sinks the expected result is different
    return p;
  });
}

// A finite fill far below a finite sink weighs exactly 0, so masked keys' values are never read even in a row
// with no visible key. cpu-flash once started its running max at the fill and leaked NaN from such values.
TEST(Sinks, FiniteFillBelowTheSinkNeverReadsMaskedValues) {
  Problem p;
  p.Hq = 2, p.Lq = 3, p.Lk = 5, p.Dqk = p.Dv = 4, p.B = 2, p.want_lse = true;
  p.fill = MaskFill::finite, p.fill_value = -1e4, p.key_lengths = {0, 3};
  p.sinks = {0.75, 2.0};
  Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 3);
  for (int64_t j = 0; j < p.Lk; ++j)  // batch 0 sees no key; batch 1 keys >= 3 are padding
    for (int64_t d = 0; d < p.Dv; ++d) {
      in.v.put(0, 0, j, d, std::nan(""));
      if (j >= 3) in.v.put(1, 0, j, d, std::nan(""));
    }
  const ExpectedAttention r = expected_attention(p, in);
  EXPECT_EQ(r.out[0], 0.0);
  for (const char* name : {"cpu", "cpu-flash"}) {
    Outputs out;
    ASSERT_TRUE(run_impl(*find_impl(name), p, in, out).ok);
    const Verdict v = judge(p, r, out);
    EXPECT_TRUE(v.pass) << name << ": " << v.worst().describe();
  }
}

// Judged on sampled reference rows (long-context verification), every row's weights must sum to 1 - exp(sink - lse).
TEST(Sinks, SampledRowsCheckTheWeightSumWithTheSink) {
  Problem p = cpu_problems()[0];
  p.want_weights = true;
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 7);
  Outputs out;
  ASSERT_TRUE(run_impl(*find_impl("cpu-flash"), p, in, out).ok);
  const Verdict v = judge(p, expected_attention_rows(p, in, {0, 5, 36}), out);
  EXPECT_TRUE(v.pass) << v.worst().describe();
  Problem plain = p;  // the same outputs read as a problem without sinks: the row sums fall short of 1
  plain.sinks.clear();
  EXPECT_FALSE(judge(plain, expected_attention_rows(plain, in, {0, 5, 36}), out).pass);
}

// The backward has no sink term: the reference refuses sinks, the CPU backward reports them unsupported.
TEST(Sinks, BackwardIsNotModelled) {
  const Problem p = tiny();
  EXPECT_THROW(reference_backward(p, tiny_inputs(p), make_dout(p)), std::invalid_argument);
  for (const char* name : {"cpu", "cpu-flash"})
    EXPECT_EQ(find_impl(name)->supports_backward(p).reason, "backward with attention sinks not implemented") << name;
}

TEST(Sinks, OfferedOnlyToPluginsThatDeclareThem) {
  Problem p = cpu_problems()[0];
  p.want_weights = false;  // the v1 example's weights are fine; keep the case about sinks
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 9);
  const ImplPtr v2 = load_plugin(EXAMPLE_PLUGIN_PATH), v1 = load_plugin(V1_PLUGIN_PATH);
  EXPECT_TRUE(v2->capabilities().sinks);
  EXPECT_FALSE(v1->capabilities().sinks);
  const Support no = v1->supports(p);
  EXPECT_FALSE(no.ok);
  EXPECT_EQ(no.reason, "attention sinks not supported");
  Outputs out;
  ASSERT_TRUE(run_impl(*v2, p, in, out).ok);
  const Verdict v = judge(p, expected_attention(p, in), out);
  EXPECT_TRUE(v.pass) << v.worst().describe();
}

}  // namespace
}  // namespace attncheck
