// The "scale made positive" probe: a candidate that fails only with a negative scale (PyTorch CPU SDPA with
// is_causal and a negative scale returns NaN) is diagnosed negative-scale-mask with the probe as evidence.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "attncheck/fixture.hpp"
#include "attncheck/reference.hpp"
#include "diagnosis.hpp"
#include "mutants.hpp"

namespace attncheck {
namespace {

const Impl& correct_impl() {
  for (const mutants::Entry& m : mutants::catalogue())
    if (m.correct) return *m.impl;
  throw std::runtime_error("no correct variant in the mutant catalogue");
}

// Correct with a positive scale; every out element NaN with a negative one.
class NegativeScaleNaN final : public Impl {
 public:
  std::string name() const override { return "negative-scale-nan"; }
  std::string description() const override { return "NaN out when the scale is negative"; }
  Capabilities capabilities() const override { return correct_impl().capabilities(); }
  Support supports(const Problem& p) const override { return correct_impl().supports(p); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    correct_impl().run(p, in, out);
    if (p.scale && *p.scale < 0)
      for (int64_t i = 0; i < out.out.numel(); ++i) out.out.set_offset(i, std::nan(""));
  }
};

TEST(ScaleProbe, NegativeScaleFailureThatAPositiveScaleRemovesIsNegativeScaleMask) {
  Fixture f =
      read_fixture(std::filesystem::path(ATTNCHECK_GOLDEN_DIR) / "fp32_B1-Hq1-Hkv1-Lq15-Lk15-D8_causal-tl_normal.h5");
  f.problem.scale = -0.5;
  f.problem.want_lse = true;
  const ExpectedAttention ref = expected_attention(f.problem, f.inputs);
  NegativeScaleNaN impl;
  Outputs out;
  ASSERT_TRUE(run_impl(impl, f.problem, f.inputs, out).ok);
  diagnose::Options o;
  o.rerun = &impl, o.tolerance = f.tolerance;
  const diagnose::Diagnosis d = diagnose::diagnose(prop::Case{{}, f.problem, f.inputs}, ref, out, o);
  EXPECT_EQ(d.top(), "negative-scale-mask");
  EXPECT_NE(d.causes.front().evidence.find("probe scale made positive"), std::string::npos)
      << d.causes.front().evidence;
  // Without the probe (no re-run) the NaN rows fit the tag only partly (this candidate also NaNs the last row,
  // which has no masked key), with no probe evidence.
  const diagnose::Diagnosis blind = diagnose::diagnose(prop::Case{{}, f.problem, f.inputs}, ref, out, {});
  for (const diagnose::Cause& c : blind.causes)
    if (c.tag == "negative-scale-mask") {
      EXPECT_LT(c.score, 1.0);
      EXPECT_EQ(c.evidence.find("probe"), std::string::npos) << c.evidence;
    }
}

}  // namespace
}  // namespace attncheck
