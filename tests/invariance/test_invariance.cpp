// Unit tests of the invariance checks (harness/property/invariance.hpp): what a bitwise comparison reports, and what
// the built-in CPU implementations honour (docs/invariance.md#what-the-built-ins-honour).
#include <gtest/gtest.h>

#include <cstring>

#include "attncheck/backward.hpp"
#include "attncheck/impl.hpp"
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
    EXPECT_NE(c.message.find("nondeterministic: run 2, 3 (after another case) of 3 differs from run 1: dq 1 of 40 (1 bits"),
              std::string::npos) << c.message;
  }
}

}  // namespace
}  // namespace attncheck
