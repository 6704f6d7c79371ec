// The AVX512-BF16 kernel (target avx3_bf16, impls/cpu/simd/bf16_dot.cpp), linked into test_cpu_isa: run under
// every forced target, it checks the kernel against a double loop where avx3_bf16 is the target, and that it is
// refused everywhere else; and that the CPU implementations keep bf16 subnormals (read as 0 by vdpbf16ps) exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "cpu_cases.hpp"
#include "simd.hpp"

namespace {
namespace simd = attncheck::cpu::simd;

// Runs impl on c (inputs in), judges it against the reference, and returns how many kernel calls it made.
int64_t run_and_judge(const char* impl, const attncheck::testing::Case& c, const attncheck::Inputs& in) {
  SCOPED_TRACE(impl);
  attncheck::validate(c.p);
  const attncheck::ExpectedAttention ref = attncheck::expected_attention(c.p, in);
  attncheck::Outputs out;
  const int64_t before = simd::bf16_dot_calls();
  EXPECT_TRUE(attncheck::run_impl(*attncheck::find_impl(impl), c.p, in, out).ok);
  const int64_t calls = simd::bf16_dot_calls() - before;
  const attncheck::Verdict v = attncheck::judge(c.p, ref, out);
  for (const auto& t : v.tensors) EXPECT_TRUE(t.pass) << t.describe() << " max_abs_err " << t.max_abs_err;
  return calls;
}

// The target named by ATTNCHECK_ISA (test_cpu_isa's argument) decides: the kernel runs under avx3_bf16 only, with
// AVX-512's strips of 32 floats; anywhere else calling it is an error.
TEST(CpuBf16Dot, SelectedExactlyUnderItsTarget) {
  const char* isa = std::getenv("ATTNCHECK_ISA");
  ASSERT_NE(isa, nullptr);
  EXPECT_EQ(simd::bf16_dot(), std::string(isa) == "avx3_bf16");
  if (simd::bf16_dot()) {
    EXPECT_EQ(simd::strip_width<float>(), 32);
    return;
  }
  std::vector<uint32_t> a(1, 0);
  std::vector<float> c(32);
  EXPECT_THROW(simd::gemm_bf16_pairs(1, 1, 1, a.data(), 1, a.data(), 32, 32, c.data(), 32), std::logic_error);
}

// Both CPU implementations take the kernel for bf16 with more than 4 query rows (even and odd head dims) under
// avx3_bf16, and never for fp16, for decode (the row layout) or under another target; results match the reference.
TEST(CpuBf16Dot, CpuImplsTakeTheKernelForBf16QueryBlocks) {
  for (const int64_t D : {int64_t{64}, int64_t{63}})
    for (const auto t : {attncheck::DType::bf16, attncheck::DType::f16})
      for (const int64_t Lq : {int64_t{100}, int64_t{1}}) {
        attncheck::testing::Case c;
        c.p.dtype = t, c.p.B = 1, c.p.Hq = 2, c.p.Hkv = 1, c.p.Lq = Lq, c.p.Lk = 300, c.p.Dqk = c.p.Dv = D;
        c.p.causal = Lq > 1;
        c.p.want_lse = true;
        c.seed = 8;
        SCOPED_TRACE(c.name());
        const bool want = simd::bf16_dot() && t == attncheck::DType::bf16 && Lq > 4;
        for (const char* impl : {"cpu-flash", "cpu"}) {
          const int64_t calls = run_and_judge(impl, c, attncheck::testing::make_inputs(c));
          EXPECT_EQ(calls > 0, want) << impl << ": " << calls << " kernel calls";
        }
      }
}

TEST(CpuBf16Dot, PairsKeepEvenLowOddHighPadZeroAndFlagSubnormals) {
  const float x[3] = {1.0f, -2.0f, 0.5f};  // bf16 0x3f80, 0xc000, 0x3f00
  uint32_t w[2] = {7, 7};
  EXPECT_TRUE(simd::pack_bf16_pairs(x, 3, w, 1));
  EXPECT_EQ(w[0], 0xc0003f80u);
  EXPECT_EQ(w[1], 0x00003f00u);
  const float sub[2] = {1.0f, std::ldexp(1.0f, -130)};  // 2^-130: a bf16 subnormal
  EXPECT_FALSE(simd::pack_bf16_pairs(sub, 2, w, 1));
  const float zero[2] = {0.0f, -0.0f};
  EXPECT_TRUE(simd::pack_bf16_pairs(zero, 2, w, 1));
}

// C = A·B on bf16 pairs against a double loop: within fp32 accumulation of exact products, k·2⁻²³·Σ|a||b|.
// Row tails (m not a multiple of 8), column tails within a strip, odd k, and k over one 128-pair block.
TEST(CpuBf16Dot, GemmOnPairsMatchesDoubleLoop) {
  if (!simd::bf16_dot()) GTEST_SKIP() << "target " << simd::target() << " has no AVX512-BF16 kernel (checked above)";
  attncheck::testing::Rng rng{99};
  auto bf = [&] {
    return attncheck::bf16_bits_to_float(attncheck::float_to_bf16_bits(static_cast<float>(rng.uniform())));
  };
  constexpr int64_t W = 32;
  for (int64_t m : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{13}})
    for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{35}, int64_t{96}})
      for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{128}, int64_t{301}}) {
        const int64_t kp = (k + 1) / 2, strips = (n + W - 1) / W, ldc = strips * W;
        std::vector<float> A(static_cast<size_t>(m * k)), Bt(static_cast<size_t>(n * k));  // Bt: row j = column j
        for (float& a : A) a = bf();
        for (float& b : Bt) b = bf();
        std::vector<uint32_t> A2(static_cast<size_t>(m * kp)), B2(static_cast<size_t>(strips * kp * W), 0u);
        for (int64_t i = 0; i < m; ++i) ASSERT_TRUE(simd::pack_bf16_pairs(&A[i * k], k, &A2[i * kp], 1));
        for (int64_t j = 0; j < n; ++j)
          ASSERT_TRUE(simd::pack_bf16_pairs(&Bt[j * k], k, &B2[j / W * kp * W + j % W], W));
        std::vector<float> C(static_cast<size_t>(m * ldc), NAN);
        simd::gemm_bf16_pairs(m, n, kp, A2.data(), kp, B2.data(), kp * W, W, C.data(), ldc);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double want = 0, mag = 0;
            for (int64_t p = 0; p < k; ++p) {
              want += static_cast<double>(A[i * k + p]) * Bt[j * k + p];
              mag += std::fabs(static_cast<double>(A[i * k + p]) * Bt[j * k + p]);
            }
            ASSERT_NEAR(C[i * ldc + j], want, static_cast<double>(k) * 0x1p-23 * mag + 1e-30)
                << "m " << m << " n " << n << " k " << k << " at " << i << "," << j;
          }
      }
}

// vdpbf16ps reads bf16 subnormals as 0 (DAZ). Here every product of a huge Q (~2^126) with a subnormal K
// (~2^-127), or the other way round, is of order 1: read as 0 every score would be 0 and every row uniform. A
// block or head with a subnormal takes the fp32 path, so both CPU implementations match the reference on every target.
TEST(CpuBf16Dot, SubnormalBf16InputsAreNotReadAsZero) {
  for (const bool subnormal_k : {true, false}) {
    attncheck::testing::Case c;
    c.p.dtype = attncheck::DType::bf16, c.p.B = 1, c.p.Hq = 2, c.p.Hkv = 2, c.p.Lq = 40, c.p.Lk = 200;
    c.p.Dqk = c.p.Dv = 64;
    c.p.want_lse = true;
    c.seed = 3;
    SCOPED_TRACE(std::string(subnormal_k ? "subnormal K" : "subnormal Q") + " " + c.name());
    attncheck::Inputs in = attncheck::testing::make_inputs(c);
    attncheck::testing::Rng rng{11};
    attncheck::Tensor& huge = subnormal_k ? in.q : in.k;
    attncheck::Tensor& tiny = subnormal_k ? in.k : in.q;
    for (int64_t n = 0; n < huge.numel(); ++n) huge.set_offset(n, std::ldexp(rng.uniform(), 126));
    for (int64_t n = 0; n < tiny.numel(); ++n) tiny.set_offset(n, std::ldexp(rng.uniform(), -127));
    for (const char* impl : {"cpu-flash", "cpu"}) EXPECT_EQ(run_and_judge(impl, c, in), 0) << impl << ": kernel calls";
  }
}

// vdpbf16ps flushes subnormal partial sums (FTZ): tiny normal inputs (±2^-64) give products of order 2^-128, a
// whole score of order 2^-123, all flushed to 0. Harmless inside the softmax (e^(2^-123) is 1), but raw scores are
// judged with a floor of only FLT_MIN, so the CPU implementations compute them on the fp32 path then.
TEST(CpuBf16Dot, RawScoresOfTinyInputsAreNotFlushed) {
  attncheck::testing::Case c;
  c.p.dtype = attncheck::DType::bf16, c.p.B = 1, c.p.Hq = 1, c.p.Hkv = 1, c.p.Lq = 24, c.p.Lk = 70;
  c.p.Dqk = c.p.Dv = 64;
  c.p.scores_out = attncheck::ScoresOut::scaled;
  c.seed = 4;
  attncheck::Inputs in = attncheck::testing::make_inputs(c);
  attncheck::testing::Rng rng{12};
  for (attncheck::Tensor* t : {&in.q, &in.k})  // one sign per tensor: the dot products do not cancel
    for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, std::ldexp(0.5 + std::fabs(rng.uniform()) / 2, -64));
  for (const char* impl : {"cpu-flash", "cpu"}) EXPECT_EQ(run_and_judge(impl, c, in), 0) << impl << ": kernel calls";
}

// The same flush under a huge scale (2^119) reaches the softmax: scores of ~2^-123 · 2^119 flushed to 0 would make
// every row uniform. Above |scale| = 2^40 the CPU implementations compute on the fp32 path.
TEST(CpuBf16Dot, HugeScaleTakesTheFp32Path) {
  attncheck::testing::Case c;
  c.p.dtype = attncheck::DType::bf16, c.p.B = 1, c.p.Hq = 1, c.p.Hkv = 1, c.p.Lq = 24, c.p.Lk = 70;
  c.p.Dqk = c.p.Dv = 64;
  c.p.scale = 0x1p119;
  c.p.want_lse = true;
  c.seed = 5;
  attncheck::Inputs in = attncheck::testing::make_inputs(c);
  attncheck::testing::Rng rng{13};
  for (attncheck::Tensor* t : {&in.q, &in.k})
    for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, std::ldexp(rng.uniform(), -64));
  for (const char* impl : {"cpu-flash", "cpu"}) EXPECT_EQ(run_and_judge(impl, c, in), 0) << impl << ": kernel calls";
}

// The fallback is per head (cpu: the head's Q, all query blocks; cpu-flash: per query block) and per K panel: one
// subnormal Q value in row 150 (past the first 96-row block) of head 1 leaves head 0 on the kernel (under
// avx3_bf16), and both heads match the reference.
TEST(CpuBf16Dot, OneSubnormalQueryFallsBackForItsHeadOnly) {
  attncheck::testing::Case c;
  c.p.dtype = attncheck::DType::bf16, c.p.B = 1, c.p.Hq = 2, c.p.Hkv = 2, c.p.Lq = 200, c.p.Lk = 150;
  c.p.Dqk = c.p.Dv = 64;
  c.p.want_lse = true;
  c.seed = 6;
  attncheck::Inputs in = attncheck::testing::make_inputs(c);
  in.q.put(0, 1, 150, 7, std::ldexp(1.0, -127));  // a bf16 subnormal, against this K value 0.5 of a dot product:
  in.k.put(0, 1, 20, 7, std::ldexp(1.0, 126));    // read as 0, row 150's weight on key 20 would move by ~6 %
  for (const char* impl : {"cpu-flash", "cpu"}) {
    const int64_t calls = run_and_judge(impl, c, in);
    EXPECT_EQ(calls > 0, simd::bf16_dot()) << impl << ": head 0 takes the kernel under avx3_bf16";
  }
}

}  // namespace
