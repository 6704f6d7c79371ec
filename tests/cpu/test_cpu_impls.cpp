// Both CPU implementations (cpu, cpu-flash) against reference_attention + judge() on the hostile case table
// (cpu_cases.hpp), plus guards that the table is not passing by accident and that results ignore thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <set>

#include "attncheck/features.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "cpu_cases.hpp"

using namespace attncheck;
using attncheck::testing::Case;

namespace {

struct Param {
  std::string impl;
  Case c;
  int index;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.impl << "/" << p.c.name(); }

std::vector<Param> params() {
  std::vector<Param> ps;
  const auto cases = attncheck::testing::hostile_cases();
  for (const char* impl : {"cpu", "cpu-flash"})
    for (size_t k = 0; k < cases.size(); ++k) ps.push_back({impl, cases[k], static_cast<int>(k)});
  return ps;
}

bool all_zero(const Tensor& t) {
  for (int64_t n = 0; n < t.numel(); ++n)
    if (t.get_offset(n) != 0.0) return false;
  return true;
}

class CpuVsReference : public ::testing::TestWithParam<Param> {};

TEST_P(CpuVsReference, MatchesReferenceWithinTolerance) {
  const Param& prm = GetParam();
  const Problem& p = prm.c.p;
  SCOPED_TRACE(prm.impl + "/" + prm.c.name());
  const ImplPtr impl = find_impl(prm.impl);
  ASSERT_NE(impl, nullptr) << prm.impl << " is not registered";
  const Inputs in = attncheck::testing::make_inputs(prm.c);
  const ExpectedAttention ref = expected_attention(p, in);
  // A non-finite error scale (e.g. from a -inf bias on a visible key) would make every tolerance NaN or inf, so
  // nothing could pass or fail: the case would prove nothing. The tolerance model handles it; keep it that way.
  for (double m : ref.score_mag) ASSERT_TRUE(std::isfinite(m)) << "reference score_mag is not finite: " << m;

  Outputs out;
  const Support s = run_impl(*impl, p, in, out);
  ASSERT_TRUE(s.ok) << "claims all capabilities but refused: " << s.reason;
  const Verdict v = judge(p, ref, out);
  for (const auto& t : v.tensors) EXPECT_TRUE(t.pass) << t.describe() << " max_abs_err " << t.max_abs_err;

  // No passing by accident: a nonzero reference output must not be matched by an all-zero one.
  bool ref_nonzero = false;
  for (double x : ref.out) ref_nonzero = ref_nonzero || (std::isfinite(x) && x != 0.0);
  if (ref_nonzero) {
    EXPECT_FALSE(all_zero(out.out)) << "all-zero output where the reference is not";
  }
  if (prm.c.poison) {  // the poison must be there, and must not reach every output
    int64_t poisoned = 0;
    for (int64_t n = 0; n < in.v.numel(); ++n) poisoned += std::isnan(in.v.get_offset(n));
    EXPECT_GT(poisoned, 0) << "case did not poison anything";
    EXPECT_TRUE(ref_nonzero) << "poisoned case whose reference has no finite nonzero output";
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string n = info.param.impl + "_" + std::to_string(info.param.index) + "_" + info.param.c.name();
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Hostile, CpuVsReference, ::testing::ValuesIn(params()), param_name);

// The output must not depend on how many threads ran it: tasks are independent and identically computed. bf16
// too: under avx3_bf16 its Q·Kᵀ takes the bf16 kernel (test_cpu_bf16_dot.cpp). Also a decode whose 128 query heads
// share one KV head (cpu-flash: packed into tiles, keys split and merged).
TEST(CpuDeterminism, SameBitsForOneAndThreeThreads) {
  for (const DType t : {DType::f32, DType::bf16})
    for (const bool decode : {false, true}) {
      Case c;
      c.p.dtype = t;
      c.p.B = 2, c.p.Hq = 4, c.p.Hkv = 2, c.p.Lq = 300, c.p.Lk = 517, c.p.Dqk = c.p.Dv = 32;
      c.p.causal = true;
      c.p.want_lse = c.p.want_weights = true;
      if (decode)
        c.p.Hq = 128, c.p.Hkv = 1, c.p.Lq = 1, c.p.Lk = 700, c.p.Dqk = 96, c.p.Dv = 64, c.p.want_weights = false;
      const Inputs in = attncheck::testing::make_inputs(c);
      for (const char* name : {"cpu", "cpu-flash"}) {
        SCOPED_TRACE(c.name());
        Outputs a, b;
        setenv("ATTNCHECK_THREADS", "1", 1);
        ASSERT_TRUE(run_impl(*find_impl(name), c.p, in, a).ok);
        setenv("ATTNCHECK_THREADS", "3", 1);
        ASSERT_TRUE(run_impl(*find_impl(name), c.p, in, b).ok);
        unsetenv("ATTNCHECK_THREADS");
        EXPECT_EQ(a.out.bytes, b.out.bytes) << name;
        EXPECT_EQ(a.lse->bytes, b.lse->bytes) << name;
        if (c.p.want_weights) EXPECT_EQ(a.weights->bytes, b.weights->bytes) << name;
      }
    }
}

// Every feature the problem model has is claimed, so the harness never reports these as unsupported.
TEST(CpuCapabilities, ClaimEverything) {
  for (const char* name : {"cpu", "cpu-flash"}) {
    const ImplPtr impl = find_impl(name);
    ASSERT_NE(impl, nullptr) << name;
    const Capabilities c = impl->capabilities();
    EXPECT_EQ(c.dtypes, (std::set<DType>{DType::f64, DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2}))
        << name;
    for (const Feature& f : problem_features()) {  // every boolean capability of the feature table
      if (f.boolean()) {
        EXPECT_TRUE(f.declared(c)) << name << ": " << f.name;
      }
    }
    EXPECT_EQ(c.fully_masked.size(), 3u) << name;
  }
}

}  // namespace
