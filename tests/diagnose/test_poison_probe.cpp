// The masked-slot probes and the two mutants they diagnose: poison in never-visible K/V slots replaced by 0 changes
// nothing the reference computes, removes the failure of a kernel that multiplies masked V by weight 0 (nan-leak,
// pytorch#101967), and a kernel that masks before scaling is named negative-scale-mask even without re-runs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "attncheck/fixture.hpp"
#include "attncheck/reference.hpp"
#include "derive.hpp"
#include "diagnosis.hpp"
#include "mutants.hpp"

namespace attncheck {
namespace {

Fixture golden(const std::string& file) { return read_fixture(std::filesystem::path(ATTNCHECK_GOLDEN_DIR) / file); }

const Impl& mutant(const std::string& name) {
  for (const mutants::Entry& m : mutants::catalogue())
    if (m.impl->name() == name) return *m.impl;
  throw std::runtime_error("no mutant " + name);
}

diagnose::Diagnosis diagnosed(const Fixture& f, const Impl* impl, const Impl* rerun) {
  Outputs out;
  EXPECT_TRUE(run_impl(*impl, f.problem, f.inputs, out).ok);
  EXPECT_FALSE(judge(f.problem, f.expected, out, f.tolerance).pass) << impl->name() << " passes " << f.name;
  diagnose::Options o;
  o.rerun = rerun, o.tolerance = f.tolerance;
  return diagnose::diagnose(prop::Case{{}, f.problem, f.inputs}, f.expected, out, o);
}

TEST(PoisonProbe, ZeroingMaskedPoisonChangesNoReferenceOutput) {
  const Fixture f = golden("fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_pad_poison_masked.h5");
  int64_t zeroed = 0;
  const prop::Case d = diagnose::zero_masked_poison(prop::Case{{}, f.problem, f.inputs}, zeroed);
  EXPECT_GT(zeroed, 0);
  for (int64_t n = 0; n < d.in.v.numel(); ++n) EXPECT_TRUE(std::isfinite(d.in.v.get_offset(n))) << n;
  const ExpectedAttention a = expected_attention(f.problem, f.inputs), b = expected_attention(d.p, d.in);
  ASSERT_EQ(a.out.size(), b.out.size());
  for (size_t n = 0; n < a.out.size(); ++n) ASSERT_EQ(a.out[n], b.out[n]) << n;
}

TEST(PoisonProbe, MaskedValuesReadIsNanLeakAndTheProbeRemovesTheFailure) {
  const Fixture f = golden("fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_pad_poison_masked.h5");
  const Impl& m = mutant("masked-values-read");
  const diagnose::Diagnosis d = diagnosed(f, &m, &m);
  EXPECT_EQ(d.top(), "nan-leak");
  bool probed = false;
  for (const auto& p : d.probes)
    if (p.name == "poison in masked slots replaced by 0") {
      probed = true;
      EXPECT_EQ(p.outcome, "pass");
    }
  EXPECT_TRUE(probed);
}

TEST(PoisonProbe, MaskBeforeScaleIsNegativeScaleMaskWithAndWithoutProbes) {
  const Fixture f = golden("fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_causal-tl-scaled_normal.h5");
  ASSERT_LT(f.problem.effective_scale(), 0);
  const Impl& m = mutant("mask-before-scale");
  EXPECT_EQ(diagnosed(f, &m, &m).top(), "negative-scale-mask");
  // Without re-runs the NaN rows are rows with masked keys under a negative scale, not an unwritten output.
  EXPECT_EQ(diagnosed(f, &m, nullptr).top(), "negative-scale-mask");
}

}  // namespace
}  // namespace attncheck
