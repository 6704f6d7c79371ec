// The AVX512-BF16 kernel (target "avx3_bf16", simd.hpp): Q·Kᵀ on bf16 pairs with vdpbf16ps. Highway 1.0.3 has
// no target for the instruction (its bf16 dot product is emulated even on AVX-512), so this one kernel is plain
// intrinsics in a function compiled with a target attribute, in the default (portable) build, and called only when
// select_target() chose it: the CPU reports AVX512-BF16 (__builtin_cpu_supports) and ATTNCHECK_ISA allows it.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "simd.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTNCHECK_HAS_BF16_KERNEL 1
#define ATTNCHECK_BF16_TARGET __attribute__((target("avx512f,avx512bf16")))
#else
#define ATTNCHECK_HAS_BF16_KERNEL 0
#endif

namespace attncheck::cpu::simd {

namespace {
std::atomic<int64_t> g_calls{0};
}  // namespace
int64_t bf16_dot_calls() { return g_calls.load(std::memory_order_relaxed); }
bool bf16_dot_compiled() { return ATTNCHECK_HAS_BF16_KERNEL != 0; }

bool pack_bf16_pairs(const float* src, int64_t k, uint32_t* dst, int64_t stride) {
  bool normal = true;
  auto bits = [&](int64_t d) -> uint32_t {
    if (d >= k) return 0;
    uint32_t u;
    std::memcpy(&u, &src[d], sizeof u);
    // A bf16 value widened to float has its low 16 bits zero; subnormal: exponent 0, mantissa not 0.
    normal = normal && ((u & 0x7f800000u) != 0 || (u & 0x007f0000u) == 0);
    return u >> 16;
  };
  for (int64_t p = 0; p < (k + 1) / 2; ++p) dst[p * stride] = bits(2 * p) | bits(2 * p + 1) << 16;
  return normal;
}

#if ATTNCHECK_HAS_BF16_KERNEL
bool bf16_dot_runnable() { return __builtin_cpu_supports("avx512bf16"); }

namespace {
// C[MR x 32] = A[MR x kp pairs] · B[kp pairs x 32]: two vectors of 16 fp32 accumulators per row; each step one
// broadcast pair of A against two vectors of B pairs.
template <int MR>
ATTNCHECK_BF16_TARGET void tile(const uint32_t* A, int64_t lda, const uint32_t* B, int64_t ldb, int64_t kp, float* C,
                                int64_t ldc, bool acc) {
  __m512 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) {
    c0[i] = acc ? _mm512_loadu_ps(C + i * ldc) : _mm512_setzero_ps();
    c1[i] = acc ? _mm512_loadu_ps(C + i * ldc + 16) : _mm512_setzero_ps();
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(B + p * ldb);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(B + p * ldb + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(A[i * lda + p]));
      c0[i] = _mm512_dpbf16_ps(c0[i], a, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], a, b1);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(C + i * ldc, c0[i]);
    _mm512_storeu_ps(C + i * ldc + 16, c1[i]);
  }
}

ATTNCHECK_BF16_TARGET void tile_rows(int64_t r, const uint32_t* A, int64_t lda, const uint32_t* B, int64_t ldb,
                                     int64_t kp, float* C, int64_t ldc, bool acc) {
  switch (r) {
    case 1: return tile<1>(A, lda, B, ldb, kp, C, ldc, acc);
    case 2: return tile<2>(A, lda, B, ldb, kp, C, ldc, acc);
    case 3: return tile<3>(A, lda, B, ldb, kp, C, ldc, acc);
    case 4: return tile<4>(A, lda, B, ldb, kp, C, ldc, acc);
    case 5: return tile<5>(A, lda, B, ldb, kp, C, ldc, acc);
    case 6: return tile<6>(A, lda, B, ldb, kp, C, ldc, acc);
    case 7: return tile<7>(A, lda, B, ldb, kp, C, ldc, acc);
    default: return tile<8>(A, lda, B, ldb, kp, C, ldc, acc);
  }
}
}  // namespace

void gemm_bf16_pairs(int64_t m, int64_t n, int64_t kp, const uint32_t* A, int64_t lda, const uint32_t* B,
                     int64_t bstride, int64_t ldb, float* C, int64_t ldc) {
  if (!bf16_dot()) throw std::logic_error("gemm_bf16_pairs: the avx3_bf16 target is not selected");
  g_calls.fetch_add(1, std::memory_order_relaxed);
  constexpr int64_t W = 32, MR = 8;
  const int64_t strips = (n + W - 1) / W;
  if (kp <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(C + i * ldc, C + i * ldc + strips * W, 0.0f);
    return;
  }
  // The same blocking as the float GEMM (simd_kernels.cpp): pairs of kc rows, A rows in L1 against one strip.
  constexpr int64_t kc = 128, kL1ABytes = 12 * 1024;
  for (int64_t k0 = 0; k0 < kp; k0 += kc) {
    const int64_t kb = std::min(kc, kp - k0);
    const int64_t mc = std::max<int64_t>(1, kL1ABytes / (kb * 4) / MR) * MR;
    for (int64_t m0 = 0; m0 < m; m0 += mc) {
      const int64_t m1 = std::min(m, m0 + mc);
      for (int64_t s = 0; s < strips; ++s)
        for (int64_t i0 = m0; i0 < m1; i0 += MR)
          tile_rows(std::min(MR, m1 - i0), A + i0 * lda + k0, lda, B + s * bstride + k0 * ldb, ldb, kb,
                    C + i0 * ldc + s * W, ldc, k0 > 0);
    }
  }
}
#else
bool bf16_dot_runnable() { return false; }
void gemm_bf16_pairs(int64_t, int64_t, int64_t, const uint32_t*, int64_t, const uint32_t*, int64_t, int64_t, float*,
                     int64_t) {
  throw std::logic_error("gemm_bf16_pairs: this binary has no AVX512-BF16 kernel");
}
#endif

}  // namespace attncheck::cpu::simd
