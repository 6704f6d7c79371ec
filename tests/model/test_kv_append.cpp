// KV-cache append (Problem::past_len; ONNX past_key/present_key, flash_attn_with_kvcache k_new/v_new): present is
// concat(past, new) exactly, attention runs over present; cpu, cpu-flash and the reference against the reference of
// the whole sequence; a wrong append fails both the judge and the property; plugins get it only when declared.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "impl_check.hpp"
#include "properties.hpp"

namespace attncheck {
namespace {

std::vector<Problem> append_problems() {
  std::vector<Problem> v;
  auto make = [&](DType t, int64_t Lq, int64_t Lk, int64_t past, auto&& tweak) {
    Problem p;
    p.dtype = t, p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = Lq, p.Lk = Lk, p.Dqk = 16, p.Dv = 8, p.past_len = past;
    p.want_lse = true;
    tweak(p);
    v.push_back(p);
  };
  make(DType::f32, 37, 150, 113, [](Problem& p) { p.causal = true, p.alignment = Alignment::bottom_right; });
  make(DType::f64, 5, 40, 1, [](Problem& p) {
    p.layout = Layout::BSHD, p.key_lengths = {40, 0}, p.want_weights = true;
  });
  make(DType::bf16, 1, 300, 299, [](Problem& p) { p.key_lengths = {211, 300}, p.sinks = {0.5, 1, 2, -1}; });  // decode
  make(DType::f16, 13, 17, 8, [](Problem& p) { p.softcap = 5, p.scores_out = ScoresOut::scaled, p.Hkv = 1; });
  return v;
}

// The inputs of problem p, and the same sequence as one problem without a past.
struct Pair {
  Inputs in;
  Attended whole;
};
Pair inputs_of(const Problem& p, uint64_t seed = 5) {
  Pair x{gen::generate_inputs(p, gen::Distribution::normal, seed), {}};
  x.whole = attend_over_present(p, x.in);
  return x;
}

TEST(KvAppend, ReferenceAttendsOverTheConcatenation) {
  for (const Problem& p : append_problems()) {
    const Pair x = inputs_of(p);
    ASSERT_EQ(x.in.k.shape[2], p.Lk - p.past_len);
    ASSERT_EQ(x.in.past_k->shape[2], p.past_len);
    const ExpectedAttention r = expected_attention(p, x.in), w = expected_attention(x.whole.p, x.whole.in);
    EXPECT_EQ(r.out, w.out) << p.name();
    EXPECT_EQ(r.lse, w.lse) << p.name();
    EXPECT_EQ(r.present_k, x.whole.in.k.to_double()) << p.name();
    EXPECT_EQ(r.present_v, x.whole.in.v.to_double()) << p.name();
    // The generator's sequence is the one of the problem without a past: fixtures of both hold the same tokens.
    EXPECT_EQ(x.whole.in.k.to_double(), gen::generate_inputs(x.whole.p, gen::Distribution::normal, 5).k.to_double());
  }
}

TEST(KvAppend, ImplementationsMatchTheReferenceAndCopyExactly) {
  for (const char* name : {"cpu", "cpu-flash", "reference"})
    for (const Problem& p : append_problems()) {
      const Pair x = inputs_of(p);
      Outputs out;
      const Support s = run_impl(*find_impl(name), p, x.in, out);
      ASSERT_TRUE(s.ok) << name << " " << p.name() << ": " << s.reason;
      const ExpectedAttention r = expected_attention(p, x.in);
      const Verdict v = judge(p, r, out);
      EXPECT_TRUE(v.pass) << name << " " << p.name() << ": " << v.worst().describe();
      // One element of present a few ulps off fails: the copy is judged exactly.
      Outputs bad = out;
      const double e = out.present_v->at(1, 0, p.Lk - 1, 0);
      bad.present_v->put(1, 0, p.Lk - 1, 0, e == 0 ? 1.0 : e * (1 + 8 * unit_roundoff(p.dtype)));
      ASSERT_NE(bad.present_v->at(1, 0, p.Lk - 1, 0), e);
      EXPECT_FALSE(judge(p, r, bad).pass) << name << " " << p.name();
      Outputs none = out;
      none.present_k.reset();
      EXPECT_FALSE(judge(p, r, none).pass) << name << " " << p.name() << ": a missing present output passed";
    }
}

// An append that puts the new tokens first (concat(new, past)): both the judge and the property catch it.
TEST(KvAppend, AWrongAppendFailsJudgeAndProperty) {
  const CpuMutant bad("new-first", [](const Impl& cpu, const Problem& p, const Inputs& in, Outputs& out) {
    if (p.past_len == 0) return cpu.run(p, in, out);
    Problem q = p;  // swap the roles of past and new
    q.past_len = p.Lk - p.past_len;
    Inputs swapped = in;
    swapped.past_k = in.k, swapped.past_v = in.v, swapped.k = *in.past_k, swapped.v = *in.past_v;
    cpu.run(q, swapped, out);
  });
  const Problem p = append_problems()[0];
  const Pair x = inputs_of(p);
  Outputs out;
  ASSERT_TRUE(run_impl(bad, p, x.in, out).ok);
  EXPECT_FALSE(judge(p, expected_attention(p, x.in), out).pass);

  prop::CaseSpec s;
  s.B = 2, s.Hq = 2, s.Hkv = 1, s.Lq = 5, s.Lk = 9, s.seed = 3;
  const prop::Property& append = *prop::find_property("append_equals_concat");
  append.prepare(s);
  const prop::Case c = prop::build_case(s);
  ASSERT_GT(c.p.past_len, 0);
  EXPECT_EQ(append.check(*find_impl("cpu"), c).kind, prop::Outcome::pass);
  const prop::Outcome o = append.check(bad, c);
  EXPECT_EQ(o.kind, prop::Outcome::fail) << o.message;
  EXPECT_NE(o.message.find("present_k"), std::string::npos) << o.message;
}

TEST(KvAppend, ValidationNamesTheField) {
  Problem p = append_problems()[3];
  p.past_len = p.Lk;
  try {
    validate(p);
    ADD_FAILURE() << "past_len = Lk accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("past_len must be in [0, Lk)"), std::string::npos) << e.what();
  }
  const Problem q = append_problems()[3];
  Inputs in = gen::generate_inputs(q, gen::Distribution::normal, 1);
  in.past_v.reset();
  try {
    validate(q, in);
    ADD_FAILURE() << "missing past_v accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("past_k/past_v: past_len=8"), std::string::npos) << e.what();
  }
}

TEST(KvAppend, NamesRoundTrip) {
  const Problem p = append_problems()[0];
  EXPECT_NE(p.name().find("/past_len=113"), std::string::npos) << p.name();
  EXPECT_EQ(parse_name(p.name()).past_len, 113);
  EXPECT_NE(p.short_name().find("past113"), std::string::npos) << p.short_name();
}

TEST(KvAppend, OfferedOnlyToImplementationsThatDeclareIt) {
  Problem p = append_problems()[0];
  const Pair x = inputs_of(p);
  const ImplPtr v2 = load_plugin(EXAMPLE_PLUGIN_PATH), v1 = load_plugin(V1_PLUGIN_PATH);
  EXPECT_TRUE(v2->capabilities().kv_append);
  EXPECT_FALSE(v1->capabilities().kv_append);
  EXPECT_EQ(v1->supports(p).reason, "KV-cache append (past/present key and value) not supported");
  Outputs out;
  ASSERT_TRUE(run_impl(*v2, p, x.in, out).ok);
  const Verdict v = judge(p, expected_attention(p, x.in), out);
  EXPECT_TRUE(v.pass) << v.worst().describe();
  if (const ImplPtr emu = find_impl("cuda-emulated")) {  // braces: gtest macros expand to if/else (-Wdangling-else)
    EXPECT_EQ(emu->supports(p).reason, "KV-cache append (past/present key and value) not supported");
  }
  for (const char* name : {"cpu", "cpu-flash"})
    EXPECT_EQ(find_impl(name)->supports_backward(p).reason, "backward with KV-cache append not implemented");
}

}  // namespace
}  // namespace attncheck
