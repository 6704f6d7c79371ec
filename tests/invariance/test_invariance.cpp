// Unit tests of the invariance checks (harness/property/invariance.hpp): what a bitwise comparison reports, and what
// the built-in CPU implementations honour (docs/invariance.md#what-the-built-ins-honour).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <cstdlib>

#include "../cpu/cpu_cases.hpp"
#include "attncheck/backward.hpp"
#include "attncheck/declarations.hpp"
#include "attncheck/fixture.hpp"
#include "case.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/schedule.hpp"
#include "invariance.hpp"

namespace attncheck {
namespace {

// One element moved by one bit: counted once, one bit, its index and both bit patterns named.
TEST(InvarianceDiff, CountsElementsAndBitsAndNamesTheFirst) {
  Outputs a;
  a.out = Tensor(DType::f32, {1, 2, 3, 4});
  for (int64_t n = 0; n < a.out.numel(); ++n) a.out.set_offset(n, 0.25 * static_cast<double>(n));
  Outputs b = a;
  uint32_t bits;
  std::memcpy(&bits, b.out.bytes.data() + 4 * 17, 4);
  bits ^= 1u;
  std::memcpy(b.out.bytes.data() + 4 * 17, &bits, 4);
  const auto d = invariance::diff_outputs(a, b);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].elements, 24);
  EXPECT_EQ(d[0].moved, 1);
  EXPECT_EQ(d[0].bits, 1);
  EXPECT_NE(d[0].first.find("out[0,1,1,1] 4.25 (0x40880000) vs"), std::string::npos) << d[0].first;
}

// Two NaNs with different payloads are the same result; NaN against a number is not.
TEST(InvarianceDiff, NaNPayloadsAreEqualNaNVersusNumberIsNot) {
  Outputs a;
  a.out = Tensor(DType::f32, {1, 1, 1, 2});
  const uint32_t nan1 = 0x7fc00000u, nan2 = 0x7fc00001u;
  std::memcpy(a.out.bytes.data(), &nan1, 4);
  Outputs b = a;
  std::memcpy(b.out.bytes.data(), &nan2, 4);
  b.out.set_offset(1, 1.0);
  const auto d = invariance::diff_outputs(a, b);
  EXPECT_EQ(d[0].moved, 1);
  EXPECT_NE(d[0].first.find("out[0,0,0,1]"), std::string::npos) << d[0].first;
}

// cpu, except that every call after the first flips the lowest bit of one element of dq (a backward whose
// accumulation order changes from call to call, as FlashAttention's dQ did under deterministic=True).
class FlakyBackward : public Impl {
 public:
  std::string name() const override { return "flaky-backward"; }
  std::string description() const override { return "cpu with a dq bit that moves after the first call"; }
  Capabilities capabilities() const override { return cpu_->capabilities(); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override { cpu_->run(p, in, out); }
  Support supports_backward(const Problem& p) const override { return cpu_->supports_backward(p); }
  void run_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout,
                    Gradients& g) const override {
    cpu_->run_backward(p, in, fwd, dout, g);
    if (calls_++ > 0) g.dq.bytes[0] ^= 1;
  }

 private:
  ImplPtr cpu_ = find_impl("cpu");
  mutable int calls_ = 0;
};

TEST(InvarianceBackward, AMovingGradientBitIsNondeterministicAndNamed) {
  Problem p;
  p.B = 1, p.Hq = p.Hkv = 2, p.Lq = 5, p.Lk = 7, p.Dqk = p.Dv = 4;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  for (Tensor* t : {&in.q, &in.k, &in.v})
    for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, 0.1 * static_cast<double>(n % 7) - 0.3);
  Tensor dout = make_dout(p);
  for (int64_t n = 0; n < dout.numel(); ++n) dout.set_offset(n, 0.05 * static_cast<double>(n % 5));
  for (bool flaky : {false, true}) {
    FlakyBackward f;
    const Impl& impl = flaky ? static_cast<const Impl&>(f) : *find_impl("cpu");
    Gradients g;
    ASSERT_TRUE(run_backward_impl(impl, p, in, dout, g).ok);
    const invariance::Check c = invariance::check_backward(impl, p, in, dout, g, 3);
    if (!flaky) {
      EXPECT_EQ(c.result, invariance::Check::invariant) << c.message;
      continue;
    }
    EXPECT_EQ(c.result, invariance::Check::violated);
    EXPECT_NE(
        c.message.find("nondeterministic: run 2, 3 (after another case) of 3 differs from run 1: dq 1 of 40 (1 bits"),
        std::string::npos)
        << c.message;
  }
}

// cpu, except that its backward moves one bit of dq under a schedule of 3 threads, a knob it declares bitwise, one
// bit of dk when k's strides are not its layout's dense ones, while it declares layout_invariant, and one bit of dv
// of every batch entry but the first.
class VariantBackward : public Impl {
 public:
  std::string name() const override { return "variant-backward"; }
  std::string description() const override { return "cpu with gradient bits that follow the schedule and the strides"; }
  Capabilities capabilities() const override { return cpu_->capabilities(); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override { cpu_->run(p, in, out); }
  Declarations declarations() const override {
    Declarations d = cpu_->declarations();
    d.schedule_knobs = d.schedule_bitwise = knob_threads;
    d.layout_invariant = true;
    return d;
  }
  Support supports_backward(const Problem& p) const override { return cpu_->supports_backward(p); }
  void run_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout,
                    Gradients& g) const override {
    cpu_->run_backward(p, in, fwd, dout, g);
    if (current_schedule().threads == 3) g.dq.bytes[0] ^= 1;
    if (in.k.strides != Tensor(in.k.dtype, in.k.shape, storage_order(p.layout)).strides) g.dk.bytes[0] ^= 1;
    for (int64_t b = 1; b < p.B; ++b) {
      const int64_t at[4] = {b, 0, 0, 0};
      g.dv.bytes[static_cast<size_t>(g.dv.offset(at)) * dtype_size(g.dv.dtype)] ^= 1;
    }
  }

 private:
  ImplPtr cpu_ = find_impl("cpu");
};

// The batch, schedule and layout checks of the backward: cpu keeps its gradient bits alone and in a larger batch,
// under 1 and 3 threads and in every layout form (BSHD, sequence-major strides, packed slices); variant-backward is
// caught by each, with its tag.
TEST(InvarianceBackward, BatchScheduleAndLayoutVariantsOfTheGradientsAreCaught) {
  Problem p;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = p.Lk = 9, p.Dqk = p.Dv = 8;
  p.causal = true;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  for (Tensor* t : {&in.q, &in.k, &in.v})
    for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, 0.1 * static_cast<double>(n % 7) - 0.3);
  Tensor dout = make_dout(p);
  for (int64_t n = 0; n < dout.numel(); ++n) dout.set_offset(n, 0.05 * static_cast<double>(n % 5));
  invariance::Options o;
  o.rerun = false, o.batch = o.schedule = o.layout = true;
  VariantBackward hostile;
  for (const Impl* impl : {find_impl("cpu").get(), static_cast<const Impl*>(&hostile)}) {
    Gradients g;
    ASSERT_TRUE(run_backward_impl(*impl, p, in, dout, g).ok);
    const auto checks = invariance::check_backward_variants(*impl, p, in, dout, g, o);
    ASSERT_EQ(checks.size(), 3u);
    if (impl != &hostile) {
      for (const auto& c : checks) EXPECT_EQ(c.result, invariance::Check::invariant) << c.message;
      EXPECT_NE(checks[2].message.find("packed QKV"), std::string::npos) << checks[2].message;
      continue;
    }
    EXPECT_EQ(checks[0].message.rfind("batch-variant: the case's gradients computed in a batch of 3", 0), 0u)
        << checks[0].message;
    EXPECT_EQ(checks[1].message.rfind("schedule-variant: the case run under threads=3 differs", 0), 0u)
        << checks[1].message;
    EXPECT_EQ(
        checks[2].message.rfind("layout-variant: the case run with sequence-major strides (storage [L,B,H,D]); as "
                                "slices of one packed QKV buffer",
                                0),
        0u)
        << checks[2].message;
  }
}

// Found by the property group on the reference: a fully masked row under the nan policy has NaN weights on every
// key, so padded keys must come dropped in the keep-mask, or the batch form gives that row a NaN out it did not have.
TEST(InvarianceBatch, PaddedKeysAreDroppedSoAFullyMaskedNanRowKeepsItsOutput) {
  prop::CaseSpec s;
  s.B = 1, s.Hq = 8, s.Hkv = 2, s.Lq = 1, s.Lk = 2, s.Dqk = s.Dv = 16;
  s.mask_kind = 2, s.mask_density = 30, s.fully_masked = FullyMasked::nan, s.scale_kind = 1, s.dropout_p = 0.5;
  s.values = prop::Values::tied_max, s.seed = 1;
  prop::normalise(s);
  prop::Case c = prop::build_case(s);
  c.p.want_lse = c.p.want_weights = true;
  Outputs first;
  ASSERT_TRUE(run_impl(*find_impl("reference"), c.p, c.in, first).ok);
  invariance::Options o;
  o.rerun = false;
  const invariance::Check k = invariance::check_forward(*find_impl("reference"), c.p, c.in, first, o).front();
  EXPECT_EQ(k.result, invariance::Check::invariant) << k.message;
  EXPECT_NE(k.message.find("keys padded from 2"), std::string::npos) << k.message;
}

// What the built-ins declare is what the tests below show them to honour.
TEST(BuiltinDeclarations, DeterministicAllBatchInvariantExceptCpuFlash) {
  for (const char* name : {"reference", "cpu", "cpu-flash"}) {
    const Declarations d = find_impl(name)->declarations();
    EXPECT_TRUE(d.deterministic) << name;
    EXPECT_EQ(d.batch_invariant, std::string(name) != "cpu-flash") << name;
    // A thread count (bitwise); cpu-flash also its key split (within tolerance); no block-order knob.
    EXPECT_EQ(d.schedule_knobs,
              std::string(name) == "cpu-flash" ? knob_threads | knob_num_splits : unsigned{knob_threads})
        << name;
    EXPECT_EQ(d.schedule_bitwise, unsigned{knob_threads}) << name;
    EXPECT_TRUE(d.layout_invariant) << name;
  }
}

testing::Case threads_case(DType t) {
  testing::Case c;
  c.p.dtype = t;
  c.p.B = 2, c.p.Hq = 4, c.p.Hkv = 2, c.p.Lq = 150, c.p.Lk = 200, c.p.Dqk = c.p.Dv = 32;
  c.p.causal = true;
  c.p.key_lengths = {200, 131};
  c.p.want_lse = c.p.want_weights = true;
  return c;
}

// The first run with one thread, the reruns and batch forms with three: the rerun check then compares thread
// counts too. Forward (fp32 and bf16, whose Q·Kᵀ may take the bf16 kernel) and backward.
TEST(CpuThreads, SameBitsForOneAndThreeThreadsForwardBackwardAndInBatches) {
  for (const DType t : {DType::f32, DType::bf16})
    for (const char* name : {"cpu", "cpu-flash"}) {
      const testing::Case c = threads_case(t);
      SCOPED_TRACE(std::string(name) + " " + c.name());
      const Inputs in = testing::make_inputs(c);
      const Impl& impl = *find_impl(name);
      Outputs first;
      Gradients g;
      Tensor dout = make_dout(c.p);
      for (int64_t n = 0; n < dout.numel(); ++n) dout.set_offset(n, 0.01 * static_cast<double>(n % 13) - 0.06);
      setenv("ATTNCHECK_THREADS", "1", 1);
      ASSERT_TRUE(run_impl(impl, c.p, in, first).ok);
      ASSERT_TRUE(run_backward_impl(impl, c.p, in, dout, g).ok);
      setenv("ATTNCHECK_THREADS", "3", 1);
      invariance::Options o;
      o.batch = impl.declarations().batch_invariant;
      const auto checks = invariance::check_forward(impl, c.p, in, first, o);
      const invariance::Check bw = invariance::check_backward(impl, c.p, in, dout, g, 2);
      unsetenv("ATTNCHECK_THREADS");
      for (const auto& k : checks) EXPECT_EQ(k.result, invariance::Check::invariant) << k.message;
      EXPECT_EQ(bw.result, invariance::Check::invariant) << bw.message;
    }
}

// cpu-flash honours the num_splits knob rather than ignoring it: a decode over 1000 keys (4 key blocks) in 1 part
// and in 3 parts gives other bits (the merge rounds), each within 1e-5 of the other.
TEST(CpuFlashSplits, TheNumSplitsKnobSplitsTheKeysWithinTolerance) {
  testing::Case c;
  c.p.B = 1, c.p.Hq = 2, c.p.Hkv = 1, c.p.Lq = 1, c.p.Lk = 1000, c.p.Dqk = c.p.Dv = 16;
  c.p.want_lse = true;
  const Inputs in = testing::make_inputs(c);
  Outputs one, three;
  {
    const ScheduleScope s(Schedule{0, 1, false});
    ASSERT_TRUE(run_impl(*find_impl("cpu-flash"), c.p, in, one).ok);
  }
  {
    const ScheduleScope s(Schedule{0, 3, false});
    ASSERT_TRUE(run_impl(*find_impl("cpu-flash"), c.p, in, three).ok);
  }
  double worst = 0;
  for (int64_t n = 0; n < one.out.numel(); ++n)
    worst = std::max(worst, std::abs(one.out.get_offset(n) - three.out.get_offset(n)));
  EXPECT_GT(worst, 0.0) << "num_splits 1 and 3 gave the same bits: the knob is not honoured";
  EXPECT_LT(worst, 1e-5);
}

// Why cpu-flash does not declare batch_invariant: one sequence, its keys padded from 127 to a longer neighbour's
// length, gives other bits than alone. cpu on the same case keeps them (so the check can tell the two apart).
TEST(CpuFlashBatch, PaddingToALongerNeighbourMovesBitsWhereCpuKeepsThem) {
  testing::Case c;
  c.p.B = 1, c.p.Hq = c.p.Hkv = 1, c.p.Lq = 129, c.p.Lk = 127, c.p.Dqk = c.p.Dv = 4;
  c.p.want_lse = true;
  const Inputs in = testing::make_inputs(c);
  invariance::Options o;
  o.rerun = false;
  for (const char* name : {"cpu", "cpu-flash"}) {
    Outputs first;
    ASSERT_TRUE(run_impl(*find_impl(name), c.p, in, first).ok);
    const invariance::Check k = invariance::check_forward(*find_impl(name), c.p, in, first, o).front();
    EXPECT_EQ(k.result, std::string(name) == "cpu" ? invariance::Check::invariant : invariance::Check::violated)
        << name << ": " << k.message;
    if (std::string(name) == "cpu-flash") {
      EXPECT_NE(k.message.find("keys padded from 127"), std::string::npos) << k.message;
    }
  }
}

// cpu, except that the rows of every batch entry but the first, and of every packed sequence but the first, come out
// with the lowest bit of out flipped: right within tolerance, but a row's bits depend on its place in the batch (a
// kernel whose first work unit takes another code path).
class FirstUnitPath : public Impl {
 public:
  std::string name() const override { return "first-unit-path"; }
  std::string description() const override { return "cpu with one bit moved in every entry or sequence but the first"; }
  Capabilities capabilities() const override { return cpu_->capabilities(); }
  Support supports(const Problem& p) const override { return cpu_->supports(p); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    cpu_->run(p, in, out);
    const size_t n = dtype_size(out.out.dtype);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i)
          if (b > 0 || (p.sequences() > 0 && p.sequence_of(i) > 0)) {
            const int64_t at[4] = {b, h, i, 0};
            out.out.bytes[static_cast<size_t>(out.out.offset(at)) * n] ^= 1;
          }
  }

 private:
  ImplPtr cpu_ = find_impl("cpu");
};

// The batch forms of the cases whose per-entry data must follow their entries: quantized-KV scales (per block of a
// token, per head), packed sequences with a bias, a keep-mask (dropout), document ids and top-k indices. cpu gives
// the same bits in each form (so the data followed), and first-unit-path is caught in each.
TEST(InvarianceBatch, FormsWithPerEntryDataCatchAPlaceDependentKernel) {
  FirstUnitPath hostile;
  for (const char* file : {"fp32_B2-Hq4-Hkv1-Lq5-Lk37-D64_kv-int8-block32-f16s_normal_q8_0.h5",
                           "bf16_B2-Hq4-Hkv2-Lq5-Lk37-D64_pad-kv-int8-head_normal.h5",
                           "fp32_B1-Hq4-Hkv2-Lq13-Lk17-D16_causal-off-2-bias-finite-fm-uniform-varlen2_normal.h5",
                           "fp32_B1-Hq4-Hkv1-Lq13-Lk17-D16_bshd-drop-varlen4_poison_masked_empty-both.h5",
                           "bf16_B2-Hq2-Hkv2-Lq7-Lk130-D16_pad-doc_normal_doc-decode.h5",
                           "bf16_B2-Hq4-Hkv1-Lq1-Lk300-D16_causal-br-pad-topk_poison_masked_topk-decode.h5"}) {
    SCOPED_TRACE(file);
    const Fixture f = read_fixture(std::string(GOLDEN_DIR) + "/cases/" + file);
    invariance::Options o;
    o.rerun = false;
    for (const Impl* impl : {find_impl("cpu").get(), static_cast<const Impl*>(&hostile)}) {
      Outputs first;
      ASSERT_TRUE(run_impl(*impl, f.problem, f.inputs, first).ok);
      const invariance::Check k = invariance::check_forward(*impl, f.problem, f.inputs, first, o).front();
      if (impl == &hostile) {
        EXPECT_EQ(k.result, invariance::Check::violated) << k.message;
        EXPECT_EQ(k.message.rfind("batch-variant: ", 0), 0u) << k.message;
      } else {
        EXPECT_EQ(k.result, invariance::Check::invariant) << k.message;
      }
    }
  }
}

}  // namespace
}  // namespace attncheck
