// Packed variable-length sequences (Problem::cu_seqlens_q/k, FlashAttention's varlen API): the reference's packed
// loops against the reference on each sequence alone, a worked example of empty sequences, cpu and cpu-flash against
// the reference (an implementation that ignores the packing fails), validation, names, and the plugin route.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attncheck/backward.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "impl_check.hpp"
#include "properties.hpp"

namespace attncheck {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<Problem> varlen_problems() {
  std::vector<Problem> v;
  auto make = [&](DType t, std::vector<int64_t> cq, std::vector<int64_t> ck, auto&& tweak) {
    Problem p;
    p.dtype = t, p.B = 1, p.Hq = 4, p.Hkv = 2, p.Lq = cq.back(), p.Lk = ck.back(), p.Dqk = 16, p.Dv = 8;
    p.cu_seqlens_q = cq, p.cu_seqlens_k = ck, p.want_lse = true;
    tweak(p);
    v.push_back(p);
  };
  make(DType::f32, {0, 37, 37, 100}, {0, 150, 151, 220},
       [](Problem& p) { p.causal = true, p.alignment = Alignment::bottom_right; });
  make(DType::f64, {0, 5, 9, 12}, {0, 0, 40, 41}, [](Problem& p) { p.layout = Layout::BSHD, p.want_weights = true; });
  make(DType::bf16, {0, 1, 2, 3}, {0, 211, 300, 301}, [](Problem& p) { p.sinks = {0.5, 1, 2, -1}; });  // decode
  make(DType::f16, {0, 6, 13}, {0, 11, 17}, [](Problem& p) {
    p.window_left = 3, p.window_right = 1, p.alignment = Alignment::bottom_right, p.softcap = 5;
    p.fill = MaskFill::finite, p.fill_value = -1e4, p.mask_shape = std::array<int64_t, 4>{1, 4, 13, 17};
  });
  return v;
}

TEST(Varlen, ReferenceEqualsEachSequenceAlone) {
  for (const Problem& p : varlen_problems()) {
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 4);
    const ExpectedAttention r = expected_attention(p, in);
    for (int64_t s = 0; s < p.sequences(); ++s) {
      const size_t u = static_cast<size_t>(s);
      const int64_t q0 = p.cu_seqlens_q[u], k0 = p.cu_seqlens_k[u];
      if (p.cu_seqlens_q[u + 1] == q0 || p.cu_seqlens_k[u + 1] == k0) continue;
      const Attended a = sequence_problem(p, in, s);
      const ExpectedAttention one = expected_attention(a.p, a.in);
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < a.p.Lq; ++i) {
          const size_t rp = static_cast<size_t>(h * p.Lq + q0 + i), rs = static_cast<size_t>(h * a.p.Lq + i);
          EXPECT_NEAR(r.lse[rp], one.lse[rs], 1e-12 * (1 + std::abs(one.lse[rs])))
              << p.name() << " h" << h << " i" << i;
          for (int64_t d = 0; d < p.Dv; ++d)
            EXPECT_NEAR(r.out[rp * 8 + static_cast<size_t>(d)], one.out[rs * 8 + static_cast<size_t>(d)], 1e-12)
                << p.name();
          for (int64_t j = 0; j < p.Lk && p.want_weights; ++j) {
            const double w = r.weights[rp * static_cast<size_t>(p.Lk) + static_cast<size_t>(j)];
            if (j < k0 || j >= k0 + a.p.Lk)
              EXPECT_EQ(w, 0.0) << "a key of another sequence has weight";
            else
              EXPECT_NEAR(w, one.weights[rs * static_cast<size_t>(a.p.Lk) + static_cast<size_t>(j - k0)], 1e-14);
          }
        }
    }
  }
}

// Two sequences, D = 1: sequence 0 has 2 queries and no keys, sequence 1 one query and two keys (k = 0, 0: equal
// weights, out = mean of v).
TEST(Varlen, EmptySequencesWorkedByHand) {
  for (FullyMasked policy : {FullyMasked::nan, FullyMasked::zero}) {
    Problem p;
    p.dtype = DType::f64, p.Lq = 3, p.Lk = 2, p.cu_seqlens_q = {0, 2, 3}, p.cu_seqlens_k = {0, 0, 2};
    p.fully_masked = policy, p.want_weights = true;
    Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
    in.v.put(0, 0, 0, 0, 1.0), in.v.put(0, 0, 1, 0, 3.0);
    const ExpectedAttention r = expected_attention(p, in);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(r.lse[static_cast<size_t>(i)], -kInf);
      if (policy == FullyMasked::nan)
        EXPECT_TRUE(std::isnan(r.out[static_cast<size_t>(i)])) << i;
      else
        EXPECT_EQ(r.out[static_cast<size_t>(i)], 0.0) << i;
    }
    EXPECT_DOUBLE_EQ(r.out[2], 2.0);
    EXPECT_DOUBLE_EQ(r.lse[2], std::log(2.0));
    EXPECT_EQ(r.weights, (std::vector<double>{0, 0, 0, 0, 0.5, 0.5}));
  }
}

TEST(Varlen, ImplementationsMatchTheReference) {
  for (const char* name : {"cpu", "cpu-flash", "reference"})
    for (const Problem& p : varlen_problems()) {
      const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
      Outputs out;
      const Support s = run_impl(*find_impl(name), p, in, out);
      ASSERT_TRUE(s.ok) << name << " " << p.name() << ": " << s.reason;
      const Verdict v = judge(p, expected_attention(p, in), out);
      EXPECT_TRUE(v.pass) << name << " " << p.name() << ": " << v.worst().describe();
      Problem flat = p;  // the same outputs judged as one unpacked sequence: wrong
      flat.cu_seqlens_q.clear(), flat.cu_seqlens_k.clear();
      EXPECT_FALSE(judge(flat, expected_attention(flat, in), out).pass) << name << " " << p.name();
    }
}

TEST(Varlen, PropertyHoldsForCpuAndKillsAnUnpackedRun) {
  const CpuMutant bad("unpacked", [](const Impl& cpu, const Problem& p, const Inputs& in, Outputs& out) {
    Problem flat = p;  // ignores the packing: attends over every key
    flat.cu_seqlens_q.clear(), flat.cu_seqlens_k.clear();
    cpu.run(flat, in, out);
  });
  expect_property_kills("varlen_equals_separate", bad, [](const prop::Case& c) { return c.p.sequences() >= 2; });
}

TEST(Varlen, ValidationNamesTheField) {
  const auto message = validation_message;
  Problem p = varlen_problems()[0];
  p.B = 2;
  EXPECT_NE(message(p).find("packed sequences need B=1"), std::string::npos) << message(p);
  p = varlen_problems()[0];
  p.cu_seqlens_k.back() = 219;
  EXPECT_NE(message(p).find("cu_seqlens_k must run from 0 to Lk=220"), std::string::npos) << message(p);
  p = varlen_problems()[0];
  p.cu_seqlens_q = {0, 40, 37, 100};
  EXPECT_NE(message(p).find("cu_seqlens_q must be nondecreasing"), std::string::npos) << message(p);
  p = varlen_problems()[1];
  p.fully_masked = FullyMasked::uniform;
  EXPECT_NE(message(p).find("sequence 0 has queries but no keys"), std::string::npos) << message(p);
}

TEST(Varlen, NamesRoundTrip) {
  const Problem p = varlen_problems()[0];
  EXPECT_NE(p.name().find("/cu_seqlens_q=0,37,37,100/cu_seqlens_k=0,150,151,220"), std::string::npos) << p.name();
  EXPECT_EQ(parse_name(p.name()).cu_seqlens_k, p.cu_seqlens_k);
  EXPECT_NE(p.short_name().find("varlen3"), std::string::npos) << p.short_name();
}

TEST(Varlen, OfferedOnlyToImplementationsThatDeclareIt) {
  Problem p = varlen_problems()[0];
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 2);
  const ImplPtr v2 = load_plugin(EXAMPLE_PLUGIN_PATH), v1 = load_plugin(V1_PLUGIN_PATH);
  EXPECT_FALSE(v1->capabilities().varlen);
  EXPECT_EQ(v1->supports(p).reason, "variable-length packed sequences not supported");
  Outputs out;
  ASSERT_TRUE(run_impl(*v2, p, in, out).ok);
  const Verdict v = judge(p, expected_attention(p, in), out);
  EXPECT_TRUE(v.pass) << v.worst().describe();
  if (const ImplPtr emu = find_impl("cuda-emulated")) {  // braces: gtest macros expand to if/else (-Wdangling-else)
    EXPECT_EQ(emu->supports(p).reason, "variable-length packed sequences not supported");
  }
}

// Backward arrived on main beside varlen: no backward models packed sequences, so each must decline them rather
// than return the gradients of the unpacked problem.
TEST(Varlen, NoBackwardAcceptsPackedSequences) {
  Problem p = varlen_problems()[0];
  for (const char* name : {"cpu", "cpu-flash"})
    EXPECT_EQ(find_impl(name)->supports_backward(p).reason, "backward with packed sequences (varlen) not implemented");
  EXPECT_EQ(load_plugin(EXAMPLE_PLUGIN_PATH)->supports_backward(p).reason,
            "the example's backward is not checked with packed sequences (no reference for it)");
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 2);
  EXPECT_THROW(reference_backward(p, in, make_dout(p)), std::invalid_argument);
}

}  // namespace
}  // namespace attncheck
