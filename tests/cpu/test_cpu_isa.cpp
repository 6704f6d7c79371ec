// One SIMD target of the CPU kernels, forced through ATTNCHECK_ISA: `test_cpu_isa <target>` runs the hostile case
// table of both CPU implementations (test_cpu_impls.cpp, linked in) plus kernel-level checks: the exp error bound
// over the whole argument range, the GEMM against a double loop, and that the forced target is the one used.
// Exit code 77 (ctest: skipped, never passed) when this CPU cannot run the target.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "cpu_cases.hpp"
#include "simd.hpp"

namespace {
namespace simd = attncheck::cpu::simd;
std::string g_target;

TEST(CpuIsa, ForcedTargetIsUsed) { EXPECT_EQ(simd::target(), g_target); }

// Integer ulp distance between two finite non-negative values of T (their bit patterns are ordered).
template <class T, class U>
U ulp_distance(T a, T b) {
  U ua, ub;
  std::memcpy(&ua, &a, sizeof(T));
  std::memcpy(&ub, &b, sizeof(T));
  return ua > ub ? ua - ub : ub - ua;
}

// Every `stride`-th bit pattern from lo to hi (both negative-to-positive ordered through the sign flip), through
// the kernel; compared with long double expl rounded once to T. Results whose true value is below the smallest
// normal number must be exactly 0 (or the smallest normal at the boundary); the rest within `bound` ulps.
// kernel: "exp" (simd::exp) or "exp_shifted" (simd::exp_shifted with m = 0, the softmax's kernel).
template <class T, class U>
void check_exp(T lo, T hi, U stride, U bound, const std::string& kernel = "exp") {
  std::vector<T> xs;
  auto add_range = [&](T a, T b) {  // a <= b, same sign: walk the bit patterns
    U ua, ub;
    std::memcpy(&ua, &a, sizeof(T));
    std::memcpy(&ub, &b, sizeof(T));
    if (ua > ub) std::swap(ua, ub);
    for (U u = ua; u <= ub && u >= ua; u += stride) {
      T x;
      std::memcpy(&x, &u, sizeof(T));
      xs.push_back(x);
    }
  };
  add_range(lo, T(-0.0));
  if (hi > T(0)) add_range(T(0), hi);
  for (T x : {lo, hi, T(0), T(-0.0), -std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN()})
    xs.push_back(x);
  std::vector<T> ys(xs.size());
  if (kernel == "exp")
    simd::exp<T>(xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
  else
    simd::exp_shifted<T>(xs.data(), ys.data(), static_cast<int64_t>(xs.size()), T(0));
  U worst = 0;
  T worst_x = 0;
  int64_t flushed = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const T x = xs[i], y = ys[i];
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(y)) << "exp(NaN) = " << y;
      continue;
    }
    const T ref = static_cast<T>(std::exp(static_cast<long double>(x)));
    if (ref < std::numeric_limits<T>::min()) {
      ++flushed;
      ASSERT_TRUE(y == T(0) || y == std::numeric_limits<T>::min()) << "exp(" << x << ") = " << y << ", want 0";
      continue;
    }
    ASSERT_TRUE(std::isfinite(y) && y > 0) << "exp(" << x << ") = " << y;
    const U d = ulp_distance<T, U>(y, ref);
    if (d > worst) worst = d, worst_x = x;
  }
  std::printf("%s<%s> on %s: %zu arguments in [%g, %g], max error %llu ulp (at %.9g), %lld flushed to 0\n",
              kernel.c_str(), sizeof(T) == 4 ? "float" : "double", g_target.c_str(), xs.size(), static_cast<double>(lo),
              static_cast<double>(hi), static_cast<unsigned long long>(worst), static_cast<double>(worst_x),
              static_cast<long long>(flushed));
  EXPECT_LE(worst, bound) << "at x = " << worst_x;
  EXPECT_GT(flushed, 0) << "the range did not reach the flush-to-zero region";
}

// The documented bound of Highway's Exp: 1 ulp from the correctly rounded result, over its whole valid range
// (to the overflow threshold). float: every 251st bit pattern (~9 million arguments); double: ~4 million.
TEST(CpuIsa, ExpWithinOneUlpFloat) { check_exp<float, uint32_t>(-104.0f, 88.7f, 251, 1); }
TEST(CpuIsa, ExpWithinOneUlpDouble) { check_exp<double, uint64_t>(-745.0, 709.7, uint64_t{1} << 41, 1); }

// exp_shifted has its own exp for arguments <= 0 (the softmax's s - max; simd_kernels.cpp): 1 ulp over every 131st
// float bit pattern in [-104, 0] (~8.6 million arguments), and over [-104, 88.7] where vectors with a positive
// argument take Highway's Exp.
TEST(CpuIsa, ExpShiftedWithinOneUlpFloat) {
  check_exp<float, uint32_t>(-104.0f, -0.0f, 131, 1, "exp_shifted");
  check_exp<float, uint32_t>(-104.0f, 88.7f, 251, 1, "exp_shifted");
}
TEST(CpuIsa, ExpShiftedWithinOneUlpDouble) {
  check_exp<double, uint64_t>(-745.0, 709.7, uint64_t{1} << 41, 1, "exp_shifted");
}

// exp_shifted: the sum and the exact zeros (-inf and far below the max), tails of every length.
TEST(CpuIsa, ExpShiftedSumsAndZeros) {
  for (int64_t n = 1; n <= 70; ++n) {
    std::vector<float> s(static_cast<size_t>(n)), d(s.size());
    for (int64_t j = 0; j < n; ++j)
      s[static_cast<size_t>(j)] = j % 5 == 3 ? -std::numeric_limits<float>::infinity()
                                             : (j % 7 == 1 ? -200.0f : -0.25f * static_cast<float>(j % 9));
    const float sum = simd::exp_shifted<float>(s.data(), d.data(), n, 0.0f);
    double want = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float x = s[static_cast<size_t>(j)], y = d[static_cast<size_t>(j)];
      if (x < -100) {
        EXPECT_EQ(y, 0.0f) << "n " << n << " j " << j;
      } else {
        EXPECT_NEAR(y, std::exp(static_cast<double>(x)), 2e-7 * std::exp(static_cast<double>(x)));
      }
      want += y;
    }
    EXPECT_NEAR(sum, want, 1e-6 * want) << "n " << n;
  }
}

// exp_shifted_rows (the softmax's call per block) gives the bits of one exp_shifted per row: values and sums, for
// row lengths with every tail, a row stride wider than the row, shifts that make some arguments positive (the
// general path), and rows of -inf and NaN.
TEST(CpuIsa, ExpShiftedRowsMatchesRowByRow) {
  for (int64_t n : {1, 7, 16, 37, 128, 256}) {
    const int64_t nr = 9, ld = n + 5;
    std::vector<float> s(static_cast<size_t>(nr * ld)), m(static_cast<size_t>(nr)), sums(m.size());
    for (int64_t r = 0; r < nr; ++r) {
      m[static_cast<size_t>(r)] = r == 4 ? -1.0f : 0.25f * static_cast<float>(r);  // row 4: some arguments > 0
      for (int64_t j = 0; j < ld; ++j)
        s[static_cast<size_t>(r * ld + j)] =
            r == 6 ? -std::numeric_limits<float>::infinity()
                   : -0.37f * static_cast<float>((r * 31 + j * 7) % 23) + 0.1f * static_cast<float>(r);
    }
    s[static_cast<size_t>(7 * ld + n / 2)] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> want(s);
    std::vector<float> want_sums(m.size());
    for (int64_t r = 0; r < nr; ++r)
      want_sums[static_cast<size_t>(r)] =
          simd::exp_shifted<float>(want.data() + r * ld, want.data() + r * ld, n, m[static_cast<size_t>(r)]);
    simd::exp_shifted_rows<float>(s.data(), ld, nr, n, m.data(), sums.data());
    EXPECT_EQ(std::memcmp(s.data(), want.data(), s.size() * sizeof(float)), 0) << "values, n " << n;
    EXPECT_EQ(std::memcmp(sums.data(), want_sums.data(), sums.size() * sizeof(float)), 0) << "sums, n " << n;
    EXPECT_TRUE(std::isnan(sums[7])) << "n " << n;
    EXPECT_EQ(sums[6], 0.0f) << "n " << n;
  }
}

// exp_shifted keeps NaN at every position of a row whose other arguments are all <= 0 (the fast path, which carries
// NaN through max_ps's operand order on x86 instead of a blend), of either sign, and the sum is NaN.
TEST(CpuIsa, ExpShiftedKeepsNaNOnTheFastPath) {
  for (int64_t n : {8, 16, 32, 37, 70}) {
    for (int64_t pos = 0; pos < n; ++pos) {
      for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()}) {
        std::vector<float> s(static_cast<size_t>(n)), d(s.size());
        for (int64_t j = 0; j < n; ++j)
          s[static_cast<size_t>(j)] = j % 3 == 0 ? -90.0f : -0.5f * static_cast<float>(j % 11);
        s[static_cast<size_t>(pos)] = nan;
        const float sum = simd::exp_shifted<float>(s.data(), d.data(), n, 0.0f);
        EXPECT_TRUE(std::isnan(sum)) << "n " << n << " NaN at " << pos << ": sum " << sum;
        for (int64_t j = 0; j < n; ++j) {
          const float x = s[static_cast<size_t>(j)], y = d[static_cast<size_t>(j)];
          if (j == pos)
            EXPECT_TRUE(std::isnan(y)) << "n " << n << " exp(NaN) at " << j << " = " << y;
          else if (x < -88.0f)
            EXPECT_EQ(y, 0.0f) << "n " << n << " j " << j;
          else
            EXPECT_NEAR(y, std::exp(static_cast<double>(x)), 2e-7 * std::exp(static_cast<double>(x))) << "n " << n;
        }
      }
    }
  }
}

// narrow_bf16 (the bf16 output store) bit for bit against the scalar float_to_bf16_bits: every 97th float bit
// pattern (both signs, NaN payloads, infinities, subnormals), the rounding ties and their neighbours, tails of
// every length.
TEST(CpuIsa, NarrowBf16MatchesScalarBitForBit) {
  std::vector<float> x;
  auto push_bits = [&](uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  };
  for (uint64_t b = 0; b <= 0xffffffffu; b += 97) push_bits(static_cast<uint32_t>(b));
  for (uint32_t hi : {0x3f80u, 0x3f81u, 0x7f7fu, 0x0000u, 0x8000u, 0xff7fu, 0x7f80u, 0x7fc0u, 0xffffu})
    for (uint32_t lo : {0x7fffu, 0x8000u, 0x8001u, 0x0000u, 0xffffu, 0x0001u}) push_bits(hi << 16 | lo);
  std::vector<uint16_t> got(x.size());
  simd::narrow_bf16(x.data(), got.data(), static_cast<int64_t>(x.size()));
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (got[i] != attncheck::float_to_bf16_bits(x[i]) && ++bad <= 5) {
      uint32_t b;
      std::memcpy(&b, &x[i], 4);
      ADD_FAILURE() << "bits 0x" << std::hex << b << ": got 0x" << got[i] << ", want 0x"
                    << attncheck::float_to_bf16_bits(x[i]);
    }
  EXPECT_EQ(bad, 0u) << "of " << x.size();
  for (int64_t n = 1; n <= 40; ++n) {  // tails: exactly n values written
    std::vector<uint16_t> out(static_cast<size_t>(n) + 1, 0xabcd);
    simd::narrow_bf16(x.data() + 1000, out.data(), n);
    for (int64_t j = 0; j < n; ++j)
      EXPECT_EQ(out[static_cast<size_t>(j)], attncheck::float_to_bf16_bits(x[static_cast<size_t>(1000 + j)]));
    EXPECT_EQ(out[static_cast<size_t>(n)], 0xabcd) << "n " << n << ": wrote past the end";
  }
}

// The packed GEMM against a double loop, over sizes that leave row, strip and k-block tails.
template <class T>
void check_gemm(double tol) {
  const int64_t W = simd::strip_width<T>();
  uint64_t state = 12345;
  auto rnd = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<T>(static_cast<double>(state >> 11) * 0x1.0p-53 - 0.5);
  };
  for (int64_t m : {int64_t{1}, int64_t{5}, int64_t{8}, int64_t{13}}) {
    for (int64_t n : {int64_t{1}, W - 1, W + 3, 3 * W}) {
      for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{300}}) {
        for (bool acc : {false, true}) {
          const int64_t strips = (n + W - 1) / W, ldc = strips * W;
          std::vector<T> A(static_cast<size_t>(m * k)), B(static_cast<size_t>(strips * k * W), T(0)),
              C(static_cast<size_t>(m * ldc));
          for (T& a : A) a = rnd();
          for (T& c : C) c = rnd();
          std::vector<double> want(C.begin(), C.end());
          std::vector<double> Bd(static_cast<size_t>(k * n));
          for (int64_t p = 0; p < k; ++p)
            for (int64_t j = 0; j < n; ++j) {
              const T b = rnd();
              Bd[static_cast<size_t>(p * n + j)] = b;
              B[static_cast<size_t>(j / W * k * W + p * W + j % W)] = b;
            }
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = acc ? want[static_cast<size_t>(i * ldc + j)] : 0.0;
              for (int64_t p = 0; p < k; ++p)
                s += static_cast<double>(A[static_cast<size_t>(i * k + p)]) * Bd[static_cast<size_t>(p * n + j)];
              want[static_cast<size_t>(i * ldc + j)] = s;
            }
          simd::gemm<T>(m, n, k, A.data(), k, B.data(), k * W, W, C.data(), ldc, acc);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j)
              ASSERT_NEAR(C[static_cast<size_t>(i * ldc + j)], want[static_cast<size_t>(i * ldc + j)],
                          tol * static_cast<double>(k + 1))
                  << "m " << m << " n " << n << " k " << k << " acc " << acc << " at " << i << "," << j;
        }
      }
    }
  }
}
// gemm_nt (rows of A against rows of B) against a double loop: key counts off the 4-key groups, k off the vector.
template <class T>
void check_gemm_nt(double tol) {
  uint64_t state = 99;
  auto rnd = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<T>(static_cast<double>(state >> 11) * 0x1.0p-53 - 0.5);
  };
  for (int64_t m : {int64_t{1}, int64_t{3}})
    for (int64_t n : {int64_t{1}, int64_t{4}, int64_t{7}, int64_t{130}})
      for (int64_t k : {int64_t{1}, int64_t{5}, int64_t{64}, int64_t{77}}) {
        const int64_t lda = k + 3, ldb = k + 1, ldc = n + 2;
        std::vector<T> A(static_cast<size_t>(m * lda)), B(static_cast<size_t>(n * ldb)),
            C(static_cast<size_t>(m * ldc));
        for (T& a : A) a = rnd();
        for (T& b : B) b = rnd();
        simd::gemm_nt<T>(m, n, k, A.data(), lda, B.data(), ldb, C.data(), ldc);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double want = 0;
            for (int64_t p = 0; p < k; ++p)
              want += static_cast<double>(A[static_cast<size_t>(i * lda + p)]) * B[static_cast<size_t>(j * ldb + p)];
            ASSERT_NEAR(C[static_cast<size_t>(i * ldc + j)], want, tol * static_cast<double>(k + 1))
                << "m " << m << " n " << n << " k " << k << " at " << i << "," << j;
          }
      }
}

// gemm_half / gemm_nt_half (B as bf16 or fp16 bits, widened by the loads) against gemm / gemm_nt on a widened
// copy of the same B: bit for bit, tails of k, of the 4-key groups and of the strips included.
void check_half_gemms(simd::Half16 kind) {
  uint64_t state = 7;
  auto bits = [&] {  // a finite 16-bit float of either sign, |x| in about [2^-6, 2^6)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const uint16_t r = static_cast<uint16_t>(state >> 40);
    return kind == simd::Half16::bf16 ? static_cast<uint16_t>((r & 0x807f) | ((0x79 + (r >> 7) % 12) << 7))
                                      : static_cast<uint16_t>((r & 0x83ff) | ((0x09 + (r >> 10) % 12) << 10));
  };
  auto widen = [&](uint16_t b) {
    return kind == simd::Half16::bf16 ? attncheck::bf16_bits_to_float(b) : attncheck::half_bits_to_float(b);
  };
  auto rnd = [&] { return widen(bits()); };
  const int64_t W = simd::strip_width<float>();
  for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{7}})
    for (int64_t n : {int64_t{1}, int64_t{5}, W, 2 * W + 3})
      for (int64_t k : {int64_t{1}, int64_t{9}, int64_t{130}}) {
        SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
        const int64_t lda = k + 2, ldc = (n + W - 1) / W * W + W;
        std::vector<float> A(static_cast<size_t>(m * lda));
        for (float& a : A) a = rnd();
        // gemm_nt: n rows of k values (row stride k + 1).
        std::vector<uint16_t> Bh(static_cast<size_t>(n * (k + 1)));
        for (uint16_t& b : Bh) b = bits();
        std::vector<float> Bf(Bh.size());
        for (size_t i = 0; i < Bh.size(); ++i) Bf[i] = widen(Bh[i]);
        std::vector<float> want(static_cast<size_t>(m * ldc), -1.0f), got = want;
        simd::gemm_nt<float>(m, n, k, A.data(), lda, Bf.data(), k + 1, want.data(), ldc);
        simd::gemm_nt_half(kind, m, n, k, A.data(), lda, Bh.data(), k + 1, got.data(), ldc);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "gemm_nt_half";
        // gemm: k rows of whole strips (row stride: the strips plus one, bstride W), accumulating or not.
        const int64_t ldb = (n + W - 1) / W * W + W;
        Bh.assign(static_cast<size_t>(k * ldb), 0);
        for (uint16_t& b : Bh) b = bits();
        Bf.resize(Bh.size());
        for (size_t i = 0; i < Bh.size(); ++i) Bf[i] = widen(Bh[i]);
        for (bool acc : {false, true}) {
          for (float& c : want) c = rnd();
          got = want;
          simd::gemm<float>(m, n, k, A.data(), lda, Bf.data(), W, ldb, want.data(), ldc, acc);
          simd::gemm_half(kind, m, n, k, A.data(), lda, Bh.data(), W, ldb, got.data(), ldc, acc);
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "gemm_half acc " << acc;
        }
      }
}
TEST(CpuIsa, GemmOnBf16BitsMatchesWidenedCopyBitForBit) { check_half_gemms(simd::Half16::bf16); }
TEST(CpuIsa, GemmOnF16BitsMatchesWidenedCopyBitForBit) { check_half_gemms(simd::Half16::f16); }

TEST(CpuIsa, GemmMatchesDoubleLoopFloat) { check_gemm<float>(1e-6); }
TEST(CpuIsa, GemmNtMatchesDoubleLoopFloat) { check_gemm_nt<float>(1e-6); }
TEST(CpuIsa, GemmNtMatchesDoubleLoopDouble) { check_gemm_nt<double>(1e-15); }
TEST(CpuIsa, GemmMatchesDoubleLoopDouble) { check_gemm<double>(1e-15); }

// Short-query problems without weights split the keys into chunks merged by their maxima (cpu_flash.cpp: fewer
// than 8 (batch, head, query block) tasks and Lk over one key block). Each case below is such a problem, with
// padding, poisoned values, windows, finite fill, dropout and fully-masked rows, checked against the reference.
TEST(CpuIsa, KeySplitDecodeMatchesReference) {
  using attncheck::testing::Case;
  std::vector<Case> cases;
  auto base = [](attncheck::DType t, int64_t Hq, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D) {
    Case c;
    c.p.dtype = t, c.p.B = 1, c.p.Hq = Hq, c.p.Hkv = Hkv, c.p.Lq = Lq, c.p.Lk = Lk, c.p.Dqk = c.p.Dv = D;
    c.p.want_lse = true;
    c.seed = 77 + static_cast<uint64_t>(Lk);
    return c;
  };
  {
    Case c = base(attncheck::DType::f32, 2, 2, 1, 1000, 64);
    c.p.key_lengths = {700};
    c.poison = true;
    cases.push_back(c);
  }
  {
    Case c = base(attncheck::DType::bf16, 4, 1, 3, 777, 40);
    c.p.causal = true;
    c.p.alignment = attncheck::Alignment::bottom_right;
    c.p.window_left = 300;
    cases.push_back(c);
  }
  {
    Case c = base(attncheck::DType::f64, 1, 1, 2, 2000, 16);
    c.p.mask_shape = std::array<int64_t, 4>{1, 1, 1, 2000};
    c.p.fill = attncheck::MaskFill::finite;
    c.p.fill_value = -1e9;
    cases.push_back(c);
  }
  {
    Case c = base(attncheck::DType::f16, 1, 1, 5, 1300, 32);
    c.p.dropout_p = 0.25;
    c.p.mask_shape = std::array<int64_t, 4>{1, 1, 5, 1300};  // row 3 fully masked
    c.p.fully_masked = attncheck::FullyMasked::uniform;
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name());
    attncheck::validate(c.p);
    const attncheck::Inputs in = attncheck::testing::make_inputs(c);
    const attncheck::ExpectedAttention ref = attncheck::expected_attention(c.p, in);
    attncheck::Outputs out;
    ASSERT_TRUE(attncheck::run_impl(*attncheck::find_impl("cpu-flash"), c.p, in, out).ok);
    const attncheck::Verdict v = attncheck::judge(c.p, ref, out);
    for (const auto& t : v.tensors) EXPECT_TRUE(t.pass) << t.describe() << " max_abs_err " << t.max_abs_err;
  }
}

// Decode on bf16 / fp16 inputs reads K and V in place as 16-bit values (cpu_pack.hpp), or, when V has a
// non-finite value, through a widened copy. Either way it must compute exactly what the fp32 path computes on the
// widened inputs: the same output rounded once to the dtype, the same lse. Both implementations, both V paths.
TEST(CpuIsa, HalfDecodeEqualsFloatDecodeOnWidenedInputs) {
  using attncheck::DType;
  using attncheck::testing::Case;
  for (const DType t : {DType::bf16, DType::f16})
    for (const bool poison : {false, true})
      for (const char* impl : {"cpu-flash", "cpu"}) {
        Case c;
        c.p.dtype = t, c.p.B = 2, c.p.Hq = 4, c.p.Hkv = 2, c.p.Lq = 1, c.p.Lk = 1000, c.p.Dqk = c.p.Dv = 64;
        c.p.want_lse = true;
        c.p.key_lengths = {1000, 613};  // padding: poisoned keys when poison
        c.poison = poison;
        c.seed = 5;
        SCOPED_TRACE(std::string(impl) + " " + c.name());
        attncheck::validate(c.p);
        const attncheck::Inputs in = attncheck::testing::make_inputs(c);
        attncheck::Problem pf = c.p;
        pf.dtype = DType::f32;
        attncheck::Inputs wide = in;
        for (attncheck::Tensor* x : {&wide.q, &wide.k, &wide.v}) {
          attncheck::Tensor f(DType::f32, x->shape);
          ASSERT_EQ(f.strides, x->strides);
          for (int64_t n = 0; n < x->numel(); ++n) f.set_offset(n, x->get_offset(n));
          *x = f;
        }
        attncheck::Outputs oh, of;
        ASSERT_TRUE(attncheck::run_impl(*attncheck::find_impl(impl), c.p, in, oh).ok);
        ASSERT_TRUE(attncheck::run_impl(*attncheck::find_impl(impl), pf, wide, of).ok);
        for (int64_t n = 0; n < of.out.numel(); ++n) {
          const float o = of.out.data<float>()[n];
          const uint16_t want = t == DType::bf16 ? attncheck::float_to_bf16_bits(o) : attncheck::float_to_half_bits(o);
          ASSERT_EQ(oh.out.data<uint16_t>()[n], want) << "out element " << n;
        }
        ASSERT_EQ(oh.lse->dtype, of.lse->dtype);
        ASSERT_EQ(0, std::memcmp(oh.lse->bytes.data(), of.lse->bytes.data(), of.lse->bytes.size())) << "lse";
      }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: test_cpu_isa <target> (one of: %s)\n",
                 [] {
                   std::string s;
                   for (const auto& t : simd::compiled_targets()) s += t + " ";
                   return s;
                 }()
                     .c_str());
    return 2;
  }
  g_target = argv[1];
  bool runnable = false;
  for (const auto& t : simd::runnable_targets()) runnable = runnable || t == g_target;
  if (!runnable) {
    std::string s;
    for (const auto& t : simd::runnable_targets()) s += t + " ";
    std::printf("SKIP: this CPU cannot run target '%s' (runnable: %s)\n", g_target.c_str(), s.c_str());
    return 77;
  }
  setenv("ATTNCHECK_ISA", g_target.c_str(), 1);
  return RUN_ALL_TESTS();
}
