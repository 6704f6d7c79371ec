// run_impl's poisoning: an implementation that leaves an output element unwritten must fail the judge, also for the
// fully-masked policy nan, whose expected masked rows are NaN (a NaN poison would have matched them).
#include <gtest/gtest.h>

#include <cmath>

#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {
namespace {

// The reference, except that it skips rows with no visible key (an early exit real kernels take): it leaves
// those rows of out, lse and weights as the harness handed them over.
class SkipsMaskedRows final : public Impl {
 public:
  std::string name() const override { return "skips-masked-rows"; }
  std::string description() const override { return "test: never writes fully masked rows"; }
  Capabilities capabilities() const override { return {}; }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    const ExpectedAttention r = expected_attention(p, in, 1);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i) {
          const size_t row = static_cast<size_t>((b * p.Hq + h) * p.Lq + i);
          if (std::isinf(r.lse[row])) continue;  // no visible key
          for (int64_t d = 0; d < p.Dv; ++d)
            out.out.put(b, h, i, d, r.out[row * static_cast<size_t>(p.Dv) + static_cast<size_t>(d)]);
          if (out.lse) out.lse->set_offset(static_cast<int64_t>(row), r.lse[row]);
          if (out.weights)
            for (int64_t j = 0; j < p.Lk; ++j)
              out.weights->put(b, h, i, j, r.weights[row * static_cast<size_t>(p.Lk) + static_cast<size_t>(j)]);
        }
  }
};

Problem with_empty_batch(FullyMasked policy) {
  Problem p;
  p.B = 2, p.Hq = 2, p.Hkv = 1, p.Lq = 3, p.Lk = 4, p.Dqk = 4, p.Dv = 3;
  p.key_lengths = {0, 4};  // batch 0 sees no key at all
  p.fully_masked = policy;
  p.want_lse = p.want_weights = true;
  return p;
}

Inputs signed_inputs(const Problem& p) {
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  int n = 0;
  for (Tensor* t : {&in.q, &in.k, &in.v})
    for (int64_t e = 0; e < t->numel(); ++e) t->set_offset(e, std::sin(0.7 * ++n));
  return in;
}

TEST(RunImpl, UnwrittenFullyMaskedRowsFailUnderEveryPolicy) {
  for (FullyMasked policy : {FullyMasked::nan, FullyMasked::zero, FullyMasked::uniform}) {
    const Problem p = with_empty_batch(policy);
    const Inputs in = signed_inputs(p);
    const ExpectedAttention expected = expected_attention(p, in, 1);
    Outputs out;
    ASSERT_TRUE(run_impl(SkipsMaskedRows{}, p, in, out).ok);
    const Verdict v = judge(p, expected, out, ToleranceModel{});
    EXPECT_FALSE(v.pass) << "policy " << to_string(policy) << ": unwritten rows passed";
    for (const auto& t : v.tensors) {
      if (t.tensor == "out") {
        EXPECT_FALSE(t.pass) << to_string(policy);
      }
    }
  }
}

TEST(RunImpl, TheReferenceItselfPassesUnderEveryPolicy) {  // the check above is not failing for another reason
  for (FullyMasked policy : {FullyMasked::nan, FullyMasked::zero, FullyMasked::uniform}) {
    const Problem p = with_empty_batch(policy);
    const Inputs in = signed_inputs(p);
    Outputs out;
    ASSERT_TRUE(run_impl(*find_impl("reference"), p, in, out).ok);
    EXPECT_TRUE(judge(p, expected_attention(p, in, 1), out, ToleranceModel{}).pass) << to_string(policy);
  }
}

}  // namespace
}  // namespace attncheck
