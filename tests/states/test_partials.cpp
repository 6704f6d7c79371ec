// A kernel's own partial states (attncheck/state_partials.hpp): cpu-flash exposes the states of its key split before
// its merge, and each is judged against the reference attention over the same keys. A part labelled with the wrong
// key range (a split boundary one block off), or a state whose sum is off, fails; problems whose key ranges do not
// keep their meaning alone are declined with the reason.
#include <gtest/gtest.h>

#include "attncheck/impl.hpp"
#include "attncheck/rng.hpp"
#include "attncheck/state_partials.hpp"

namespace attncheck {
namespace {

Inputs random_inputs(const Problem& p, uint64_t seed) {
  Rng rng(seed);
  Inputs in;
  in.q = make_qkv(p, 0), in.k = make_qkv(p, 1), in.v = make_qkv(p, 2);
  for (Tensor* t : {&in.q, &in.k, &in.v})
    for (int64_t i = 0; i < t->numel(); ++i) t->set_offset(i, rng.normal());
  return in;
}

std::vector<Problem> cases() {
  std::vector<Problem> ps;
  Problem decode;  // flash-decoding: one query per head, GQA, bf16
  decode.B = 2, decode.Hq = 8, decode.Hkv = 2, decode.Lq = 1, decode.Lk = 1000, decode.Dqk = decode.Dv = 64;
  decode.dtype = DType::bf16, decode.want_lse = true;
  ps.push_back(decode);
  Problem prefill;  // causal bottom-right: the later parts hold empty rows
  prefill.B = 1, prefill.Hq = 4, prefill.Hkv = 4, prefill.Lq = 70, prefill.Lk = 300, prefill.Dqk = prefill.Dv = 32;
  prefill.causal = true, prefill.alignment = Alignment::bottom_right;
  ps.push_back(prefill);
  Problem padded;  // key padding and a window, fp16, softcapped
  padded.B = 2, padded.Hq = 2, padded.Hkv = 1, padded.Lq = 5, padded.Lk = 400, padded.Dqk = padded.Dv = 16;
  padded.dtype = DType::f16, padded.key_lengths = {400, 150}, padded.causal = true,
  padded.alignment = Alignment::bottom_right;
  padded.window_left = 200, padded.softcap = 30;
  ps.push_back(padded);
  return ps;
}

TEST(KernelPartials, CpuFlashExposesEachPartAndEachPasses) {
  const ImplPtr flash = find_impl("cpu-flash");
  ASSERT_TRUE(flash);
  uint64_t seed = 1;
  for (const Problem& p : cases()) {
    ASSERT_TRUE(flash->supports_partials(p).ok) << p.name() << ": " << flash->supports_partials(p).reason;
    const Inputs in = random_inputs(p, seed++);
    for (int64_t splits : {1, 3, 5}) {
      KernelPartials k;
      flash->run_partials(p, in, splits, k);
      ASSERT_LE(k.states.size(), static_cast<size_t>(splits)) << p.name();  // never more parts than key blocks
      ASSERT_EQ(k.states.size() > 1, splits > 1) << p.name();
      EXPECT_EQ(k.begin.front(), 0);
      EXPECT_EQ(k.end.back(), p.Lk);
      for (size_t c = 1; c < k.begin.size(); ++c) EXPECT_EQ(k.begin[c], k.end[c - 1]);  // a partition of the keys
      const PartialsVerdict v = judge_partials(p, in, k);
      std::string all;
      for (const std::string& line : v.lines) all += line + "\n";
      EXPECT_TRUE(v.pass) << p.name() << " in " << splits << " parts:\n" << all;
      // The parts merge to the whole (the merge model of docs/states.md), within the attention tolerance too.
      if (splits > 1) {
        KernelPartials whole{{0}, {p.Lk}, {merge_states(k.states)}};
        EXPECT_TRUE(judge_partials(p, in, whole).pass) << p.name();
      }
    }
  }
}

TEST(KernelPartials, AWrongRangeOrAWrongSumFails) {
  const ImplPtr flash = find_impl("cpu-flash");
  ASSERT_TRUE(flash);
  const Problem p = cases()[0];
  const Inputs in = random_inputs(p, 7);
  KernelPartials k;
  flash->run_partials(p, in, 3, k);
  ASSERT_TRUE(judge_partials(p, in, k).pass);
  KernelPartials shifted = k;  // the boundary between parts 0 and 1 reported one key block late
  shifted.end[0] += 64, shifted.begin[1] += 64;
  EXPECT_FALSE(judge_partials(p, in, shifted).pass);
  KernelPartials off = k;  // part 2's sum 1% too large: its O and lse are off
  for (double& l : off.states[2].l) l *= 1.01;
  const PartialsVerdict v = judge_partials(p, in, off);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.lines[0].find("FAIL"), std::string::npos) << v.lines[0];  // the parts are judged one by one
  EXPECT_NE(v.lines[2].find("FAIL"), std::string::npos) << v.lines[2];
}

TEST(KernelPartials, ProblemsWhoseRangesDependOnTheRowAreDeclined) {
  const ImplPtr flash = find_impl("cpu-flash");
  Problem p = cases()[0];
  p.sinks = std::vector<double>(static_cast<size_t>(p.Hq), 0.5);  // a sink joins the whole row's denominator once
  const Support s = flash->supports_partials(p);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("cannot be judged"), std::string::npos) << s.reason;
  EXPECT_THROW(judge_partials(p, random_inputs(p, 3), KernelPartials{}), std::invalid_argument);
  EXPECT_FALSE(find_impl("cpu")->supports_partials(cases()[0]).ok);  // not exposed: the default
}

}  // namespace
}  // namespace attncheck
