// `compare --policy`: a correct kernel with the zero fully-masked policy (here the cpu backend) is judged against a
// fixture written with the nan policy. Without the declaration it fails; with `--policy zero` the reference
// recomputes the expectation and it passes; a wrong declaration still fails; a bad value is exit 2 naming the flag.
#include <gtest/gtest.h>

#include "attncheck/fixture.hpp"
#include "attncheck/impl.hpp"
#include "cli_util.hpp"

using namespace attncheck;

TEST(ComparePolicy, ZeroPolicyCandidateAgainstANanFixture) {
  const std::string fix = test::golden_case("fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_pad-fm-nan_normal_empty-batch.h5");
  const Fixture f = read_fixture(fix);
  ASSERT_EQ(f.problem.fully_masked, FullyMasked::nan);
  Problem zero = f.problem;
  zero.fully_masked = FullyMasked::zero;
  Outputs out;
  ASSERT_TRUE(run_impl(*find_impl("cpu"), zero, f.inputs, out).ok);
  const auto dir = test::scratch("compare_policy");
  const std::string cand = (dir / "zero.h5").string();
  write_candidate(cand, zero, out);

  auto r = test::run("compare --expected " + fix + " --actual " + cand);
  EXPECT_EQ(r.rc, 1) << "the fixture's rows are NaN, the candidate's 0: " << r.out;
  r = test::run("compare --expected " + fix + " --actual " + cand + " --policy zero");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("judged under the declared fully-masked policy zero (fixture: nan"), std::string::npos) << r.out;
  r = test::run("compare --expected " + fix + " --actual " + cand + " --policy uniform");
  EXPECT_EQ(r.rc, 1) << "a wrong declaration must not pass: " << r.out;
  r = test::run("compare --expected " + fix + " --actual " + cand + " --policy sometimes");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--policy: unknown value 'sometimes'"), std::string::npos) << r.out;
}

// `compare --contract`: a candidate that rounds its fp32 operands to bf16 fails the default fp32 contract and
// passes when it declares that rounding; a malformed contract is exit 2 naming the flag.
TEST(CompareContract, DeclaredOperandRoundingIsJudgedByItsBound) {
  const std::string fix = test::golden_case("fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_causal-br_normal.h5");
  const Fixture f = read_fixture(fix);
  Inputs rounded = f.inputs;
  for (Tensor* t : {&rounded.q, &rounded.k, &rounded.v})
    for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, round_to(DType::bf16, t->get_offset(n)));
  Outputs out;
  ASSERT_TRUE(run_impl(*find_impl("reference"), f.problem, rounded, out).ok);
  const auto dir = test::scratch("compare_contract");
  const std::string cand = (dir / "bf16_operands.h5").string();
  write_candidate(cand, f.problem, out);

  auto r = test::run("compare --expected " + fix + " --actual " + cand);
  EXPECT_EQ(r.rc, 1) << "bf16 operand rounding is far outside the fp32 contract: " << r.out;
  r = test::run("compare --expected " + fix + " --actual " + cand + " --contract qk=bf16,pv=bf16");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("judged under the declared precision contract qk=bf16"), std::string::npos) << r.out;
  r = test::run("compare --expected " + fix + " --actual " + cand + " --contract qk=int3");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--contract: "), std::string::npos) << r.out;
}
