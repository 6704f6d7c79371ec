// Highway implementation of simd.hpp: this file is compiled once per target by hwy/foreach_target.h (each copy in
// its own namespace, so nothing is shared between targets); the HWY_ONCE part at the end holds the dispatch
// tables and the target selection (ATTNCHECK_ISA).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd_kernels.cpp"
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1  // also compile the Ice Lake / Zen 4 AVX-512 target
#endif
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attncheck/problem.hpp"  // half_bits_to_float, bf16_bits_to_float for the tails
#include "simd.hpp"               // Codes8

HWY_BEFORE_NAMESPACE();
namespace attncheck::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows of C per register tile: MR x (2 vectors) accumulators, leaving registers for two B loads and a broadcast.
constexpr size_t kMaxMR = (HWY_TARGET <= HWY_AVX3) ? 8 : 6;

template <class T>
int64_t StripWidth() {
  return static_cast<int64_t>(2 * hn::Lanes(hn::ScalableTag<T>()));
}
int64_t StripWidthF32() { return StripWidth<float>(); }
int64_t StripWidthF64() { return StripWidth<double>(); }
int64_t TargetBit() { return HWY_TARGET; }

// One vector of B as T: loaded, or (B in bf16 / fp16, T float) loaded at half width and widened in registers,
// exactly, so a GEMM on 16-bit B computes the same bits as on a widened copy of it.
template <class D, class TB>
HWY_INLINE hn::Vec<D> LoadB(D d, const TB* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<TB, hn::TFromD<D>>) {
    return hn::LoadU(d, p);
  } else {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<TB, D>(), p));
  }
}
// One element of B as T (the tails), the same exact widening.
template <class T, class TB>
HWY_INLINE T ElemB(const TB* p) {
  if constexpr (std::is_same_v<TB, T>) {
    return *p;
  } else {
    uint16_t bits;
    std::memcpy(&bits, p, sizeof bits);
    return std::is_same_v<TB, hwy::bfloat16_t> ? bf16_bits_to_float(bits) : half_bits_to_float(bits);
  }
}

// The B operands of the GEMMs, read through a cursor: load(d, r, e) is the vector of row r, elements e.. (e a
// multiple of the vector length), elem(r, e) one element, at(r, s) the cursor moved down r rows and to strip s.
// Floats (or 16-bit floats widened in registers) where B lies, strip s at s·bstride:
template <class T, class TB>
struct FloatB {
  const TB* B;
  int64_t bstride, ldb;
  template <class D>
  HWY_INLINE hn::Vec<D> load(D d, int64_t r, int64_t e) const {
    return LoadB(d, B + r * ldb + e);
  }
  HWY_INLINE T elem(int64_t r, int64_t e) const { return ElemB<T>(B + r * ldb + e); }
  HWY_INLINE FloatB at(int64_t r, int64_t s) const { return {B + s * bstride + r * ldb, bstride, ldb}; }
};
// 8-bit codes of a quantized cache (simd.hpp Codes8), row-major (strips W apart), dequantised in registers: each
// value fl32(code · scale), one rounding, so exactly the float a dequantised copy would hold. e0: the element index
// of column 0 (the scale groups count from the row's start). The code format (kLut: fp8 through the table, else
// int8) and where the scales change (kScale) are template arguments, so the inner loops do not branch on them.
enum ScaleAt { kPerRow, kPerVector, kPerLane };  // one scale per row; per group of whole vectors; gathered per lane
template <bool kLut, ScaleAt kScale>
struct CodesB {
  const uint8_t* B;
  int64_t ldb;
  const float* scales;  // row 0's groups
  int64_t e0;
  Codes8 c;
  template <class D>
  HWY_INLINE hn::Vec<D> load(D d, int64_t r, int64_t e) const {
    const hn::RebindToSigned<D> di;
    const uint8_t* p = B + r * ldb + e;
    hn::Vec<D> x;
    if constexpr (!kLut) {
      x = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, D>(), reinterpret_cast<const int8_t*>(p))));
    } else {
      const hn::RebindToUnsigned<D> du;
      x = hn::GatherIndex(d, c.lut, hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, D>(), p))));
    }
    const float* srow = scales + r * c.groups;
    if constexpr (kScale == kPerRow) return hn::Mul(x, hn::Set(d, srow[0]));
    if constexpr (kScale == kPerVector) return hn::Mul(x, hn::Set(d, srow[(e0 + e) / c.group]));
    return hn::Mul(x, hn::GatherIndex(d, srow, hn::LoadU(di, c.gidx + e0 + e)));
  }
  HWY_INLINE float elem(int64_t r, int64_t e) const {
    const uint8_t code = B[r * ldb + e];
    const float x = kLut ? c.lut[code] : static_cast<float>(static_cast<int8_t>(code));
    return x * scales[r * c.groups + (kScale == kPerRow ? 0 : (e0 + e) / c.group)];
  }
  HWY_INLINE CodesB at(int64_t r, int64_t s) const {
    const int64_t W = StripWidth<float>();
    return {B + s * W + r * ldb, ldb, scales + r * c.groups, e0 + s * W, c};
  }
};
// f(cursor) with the CodesB instance that c calls for.
template <class F>
HWY_INLINE void WithCodes(const Codes8& c, const uint8_t* B, int64_t ldb, const float* scales, F&& f) {
  auto with_scale = [&](auto lut) {
    constexpr bool kLut = decltype(lut)::value;
    if (c.groups == 1) return f(CodesB<kLut, kPerRow>{B, ldb, scales, 0, c});
    if (c.gidx == nullptr) return f(CodesB<kLut, kPerVector>{B, ldb, scales, 0, c});
    return f(CodesB<kLut, kPerLane>{B, ldb, scales, 0, c});
  };
  if (c.lut) return with_scale(std::true_type());
  return with_scale(std::false_type());
}

// C[MR x W] (+)= A[MR x k] · Bstrip[k x W]; A rows are lda apart, the strip read through the cursor B.
template <size_t MR, class T, class BC>
HWY_INLINE void Tile(const T* HWY_RESTRICT A, int64_t lda, const BC& B, int64_t k, T* HWY_RESTRICT C, int64_t ldc,
                     bool acc) {
  const hn::ScalableTag<T> d;
  const size_t N = hn::Lanes(d);
  using V = hn::Vec<decltype(d)>;
  V c0[MR], c1[MR];
  for (size_t i = 0; i < MR; ++i) {
    c0[i] = acc ? hn::LoadU(d, C + i * ldc) : hn::Zero(d);
    c1[i] = acc ? hn::LoadU(d, C + i * ldc + N) : hn::Zero(d);
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < k; ++p) {
    const V b0 = B.load(d, p, 0), b1 = B.load(d, p, static_cast<int64_t>(N));
    for (size_t i = 0; i < MR; ++i) {
      const V a = hn::Set(d, A[i * lda + p]);
      c0[i] = hn::MulAdd(a, b0, c0[i]);
      c1[i] = hn::MulAdd(a, b1, c1[i]);
    }
  }
  for (size_t i = 0; i < MR; ++i) {
    hn::StoreU(c0[i], d, C + i * ldc);
    hn::StoreU(c1[i], d, C + i * ldc + N);
  }
}

template <class T, class BC>
HWY_INLINE void TileRows(size_t r, const T* A, int64_t lda, const BC& B, int64_t k, T* C, int64_t ldc, bool acc) {
  switch (r) {
    case 1: return Tile<1>(A, lda, B, k, C, ldc, acc);
    case 2: return Tile<2>(A, lda, B, k, C, ldc, acc);
    case 3: return Tile<3>(A, lda, B, k, C, ldc, acc);
    case 4: return Tile<4>(A, lda, B, k, C, ldc, acc);
    case 5: return Tile<5>(A, lda, B, k, C, ldc, acc);
    case 6: return Tile<6>(A, lda, B, k, C, ldc, acc);
#if HWY_TARGET <= HWY_AVX3
    case 7: return Tile<7>(A, lda, B, k, C, ldc, acc);
    case 8: return Tile<8>(A, lda, B, k, C, ldc, acc);
#endif
    default: return;
  }
}

// Blocked so that the B block in use (kc rows of a few strips) stays in L2, and a block of A rows (mc x kc) with
// one B strip (kc x W) in L1: every row tile of the block runs against the strip before the next strip is read.
template <class T, class BC>
void Gemm(int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const BC& B, T* C, int64_t ldc, bool accumulate) {
  const int64_t W = StripWidth<T>(), strips = (n + W - 1) / W;
  if (k <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(C + i * ldc, C + i * ldc + strips * W, T(0));
    return;
  }
  constexpr int64_t kc = 256, kL2Bytes = 192 * 1024, kL1ABytes = 12 * 1024;
  for (int64_t k0 = 0; k0 < k; k0 += kc) {
    const int64_t kb = std::min(kc, k - k0);
    const int64_t mr = static_cast<int64_t>(kMaxMR);
    const int64_t mc = std::max<int64_t>(1, kL1ABytes / (kb * static_cast<int64_t>(sizeof(T))) / mr) * mr;
    const bool acc = accumulate || k0 > 0;
    const int64_t nsb = std::max<int64_t>(1, kL2Bytes / (kb * W * static_cast<int64_t>(sizeof(T))));
    for (int64_t s0 = 0; s0 < strips; s0 += nsb) {
      const int64_t s1 = std::min(strips, s0 + nsb);
      for (int64_t m0 = 0; m0 < m; m0 += mc) {
        const int64_t m1 = std::min(m, m0 + mc);
        for (int64_t s = s0; s < s1; ++s)
          for (int64_t i0 = m0; i0 < m1; i0 += static_cast<int64_t>(kMaxMR)) {
            const size_t r = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kMaxMR), m1 - i0));
            TileRows(r, A + i0 * lda + k0, lda, B.at(k0, s), kb, C + i0 * ldc + s * W, ldc, acc);
          }
      }
    }
  }
}
void GemmF32(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t bstride, int64_t ldb,
             float* C, int64_t ldc, bool accumulate) {
  Gemm(m, n, k, A, lda, FloatB<float, float>{B, bstride, ldb}, C, ldc, accumulate);
}
void GemmF64(int64_t m, int64_t n, int64_t k, const double* A, int64_t lda, const double* B, int64_t bstride,
             int64_t ldb, double* C, int64_t ldc, bool accumulate) {
  Gemm(m, n, k, A, lda, FloatB<double, double>{B, bstride, ldb}, C, ldc, accumulate);
}
void GemmBF16(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint16_t* B, int64_t bstride,
              int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  Gemm(m, n, k, A, lda, FloatB<float, hwy::bfloat16_t>{reinterpret_cast<const hwy::bfloat16_t*>(B), bstride, ldb}, C,
       ldc, accumulate);
}
void GemmF16(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint16_t* B, int64_t bstride,
             int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  Gemm(m, n, k, A, lda, FloatB<float, hwy::float16_t>{reinterpret_cast<const hwy::float16_t*>(B), bstride, ldb}, C, ldc,
       accumulate);
}
void GemmCodes(const Codes8& c, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint8_t* B,
               int64_t ldb, const float* scales, float* C, int64_t ldc, bool accumulate) {
  WithCodes(c, B, ldb, scales, [&](const auto& b) { Gemm(m, n, k, A, lda, b, C, ldc, accumulate); });
}

// C[i][j] = sum_p A[i][p] · B[j][p] (both row-major): for a few rows against rows of K as they lie in memory,
// four keys at a time, each a vector accumulator reduced at the end; k tail through a zero-padded buffer.
template <class T, class BC>
void GemmNT(int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const BC& B, T* C, int64_t ldc) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), kv = k / N * N;
  auto tail = [&](auto elem) {  // the last k - kv values as T, zero-padded to a vector
    alignas(64) T buf[64 / sizeof(T)] = {};
    for (int64_t p = kv; p < k; ++p) buf[p - kv] = elem(p);
    return hn::LoadU(d, buf);
  };
  auto btail = [&](int64_t j) { return tail([&](int64_t p) { return B.elem(j, p); }); };
  for (int64_t i = 0; i < m; ++i) {
    const T* a = A + i * lda;
    const auto at = tail([&](int64_t p) { return a[p]; });
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      auto c0 = hn::Zero(d), c1 = hn::Zero(d), c2 = hn::Zero(d), c3 = hn::Zero(d);
      for (int64_t p = 0; p < kv; p += N) {
        const auto x = hn::LoadU(d, a + p);
        c0 = hn::MulAdd(x, B.load(d, j, p), c0);
        c1 = hn::MulAdd(x, B.load(d, j + 1, p), c1);
        c2 = hn::MulAdd(x, B.load(d, j + 2, p), c2);
        c3 = hn::MulAdd(x, B.load(d, j + 3, p), c3);
      }
      if (kv < k) {
        c0 = hn::MulAdd(at, btail(j), c0);
        c1 = hn::MulAdd(at, btail(j + 1), c1);
        c2 = hn::MulAdd(at, btail(j + 2), c2);
        c3 = hn::MulAdd(at, btail(j + 3), c3);
      }
      C[i * ldc + j] = hn::GetLane(hn::SumOfLanes(d, c0));
      C[i * ldc + j + 1] = hn::GetLane(hn::SumOfLanes(d, c1));
      C[i * ldc + j + 2] = hn::GetLane(hn::SumOfLanes(d, c2));
      C[i * ldc + j + 3] = hn::GetLane(hn::SumOfLanes(d, c3));
    }
    for (; j < n; ++j) {
      auto c0 = hn::Zero(d);
      for (int64_t p = 0; p < kv; p += N) c0 = hn::MulAdd(hn::LoadU(d, a + p), B.load(d, j, p), c0);
      if (kv < k) c0 = hn::MulAdd(at, btail(j), c0);
      C[i * ldc + j] = hn::GetLane(hn::SumOfLanes(d, c0));
    }
  }
}
void GemmNTF32(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
               int64_t ldc) {
  GemmNT(m, n, k, A, lda, FloatB<float, float>{B, 0, ldb}, C, ldc);
}
void GemmNTF64(int64_t m, int64_t n, int64_t k, const double* A, int64_t lda, const double* B, int64_t ldb, double* C,
               int64_t ldc) {
  GemmNT(m, n, k, A, lda, FloatB<double, double>{B, 0, ldb}, C, ldc);
}
void GemmNTBF16(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint16_t* B, int64_t ldb, float* C,
                int64_t ldc) {
  GemmNT(m, n, k, A, lda, FloatB<float, hwy::bfloat16_t>{reinterpret_cast<const hwy::bfloat16_t*>(B), 0, ldb}, C, ldc);
}
void GemmNTF16(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint16_t* B, int64_t ldb, float* C,
               int64_t ldc) {
  GemmNT(m, n, k, A, lda, FloatB<float, hwy::float16_t>{reinterpret_cast<const hwy::float16_t*>(B), 0, ldb}, C, ldc);
}
void DequantizeCodes(const Codes8& c, const uint8_t* B, int64_t ldb, const float* scales, int64_t n, int64_t k,
                     float* dst) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  WithCodes(c, B, ldb, scales, [&](const auto& b) {
    for (int64_t r = 0; r < n; ++r) {
      float* o = dst + r * k;
      int64_t e = 0;
      for (; e + N <= k; e += N) hn::StoreU(b.load(d, r, e), d, o + e);
      for (; e < k; ++e) o[e] = b.elem(r, e);
    }
  });
}
void GemmNTCodes(const Codes8& c, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint8_t* B,
                 int64_t ldb, const float* scales, float* C, int64_t ldc) {
  WithCodes(c, B, ldb, scales, [&](const auto& b) { GemmNT(m, n, k, A, lda, b, C, ldc); });
}

// exp with exact zeros below the smallest normal number and NaN kept (Highway's Exp maps NaN to 0).
template <class D, class V>
HWY_INLINE V Exp0(D d, V x) {
  using T = hn::TFromD<D>;
  const V y = hn::Exp(d, x);
  const V z = hn::IfThenZeroElse(hn::Lt(y, hn::Set(d, std::numeric_limits<T>::min())), y);
  return hn::IfThenElse(hn::IsNaN(x), x, z);
}

// exp0 for float arguments x <= 0 (and NaN, -inf): the softmax's exp(s - max). Same method as Highway's Exp
// (round x/ln2 to q, r = x - q·ln2 in two parts, polynomial, scale by 2^q), but the domain needs only one
// scaling step (q in [-127, 0], 2^q straight from the bits of the rounding: 2^-127 comes out as exactly 0), no
// float->int conversion fix-ups and no second range check: about a third fewer instructions. The polynomial is
// e^r's Taylor series to r^7 (truncation < 1e-8 relative for |r| <= ln2/2); tests/cpu measures the result over
// every 131st float bit pattern in [-104, 0] on every target: max error 1 ulp, as Highway's Exp.
// NaN: on x86 targets Max(c, x) is max_ps, which returns its second operand when either is NaN, so a NaN argument
// flows through every step and the final compare (false for NaN) keeps it, without a blend (a blend and its compare
// cost ~9 % of this function on AVX2). Highway's emulated Max returns the other operand instead: NaN is put back
// explicitly there. tests/cpu checks NaN at every position of fast-path vectors on every target.
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
constexpr bool kMaxKeepsNaN = false;
#else
constexpr bool kMaxKeepsNaN = true;
#endif
template <class D, class V>
HWY_INLINE V ExpNonPositive(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V magic = hn::Set(d, 12582912.0f);      // 1.5·2^23: adding it rounds to an integer in the low mantissa bits
  const V xc = hn::Max(hn::Set(d, -88.0f), x);  // exp(-88) < 2^-126: below it everything is 0 anyway
  const V t = hn::MulAdd(xc, hn::Set(d, 1.44269504088896341f), magic);
  const V q = hn::Sub(t, magic);
  V r = hn::MulAdd(q, hn::Set(d, -0.693145751953125f), xc);  // ln 2 in two parts: q·hi is exact
  r = hn::MulAdd(q, hn::Set(d, -1.428606765330187045e-6f), r);
  V p = hn::Set(d, 1.0f / 5040);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 720));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  const V e = hn::Add(hn::MulAdd(p, hn::Mul(r, r), r), hn::Set(d, 1.0f));
  // bits(t) = bits(magic) + q; shifted left by 23 only q + 127 survives: the exponent field of 2^q.
  const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::BitCast(di, t), hn::Set(di, 127))));
  const V y = hn::Mul(e, scale);
  const V z = hn::IfThenZeroElse(hn::Lt(y, hn::Set(d, std::numeric_limits<float>::min())), y);
  if constexpr (kMaxKeepsNaN) return z;
  return hn::IfThenElse(hn::IsNaN(x), x, z);
}

// exp0 of two vectors of s - m in place: the fast path when no lane is positive (the softmax: m is the max),
// else Highway's Exp (any argument).
template <class D, class V>
HWY_INLINE void Exp0Pair(D d, V& x0, V& x1) {
  if constexpr (sizeof(hn::TFromD<D>) == 4) {
    const V zero = hn::Zero(d);
    if (hn::AllFalse(d, hn::Or(hn::Gt(x0, zero), hn::Gt(x1, zero)))) {
      x0 = ExpNonPositive(d, x0);
      x1 = ExpNonPositive(d, x1);
      return;
    }
  }
  x0 = Exp0(d, x0);
  x1 = Exp0(d, x1);
}

// dst = exp0(src - m) over n values; returns their sum (two vector accumulators, then the lanes, fixed order).
template <class T>
HWY_INLINE T ExpShifted(const T* src, T* dst, int64_t n, T m) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vm = hn::Set(d, m);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    auto y0 = hn::Sub(hn::LoadU(d, src + j), vm), y1 = hn::Sub(hn::LoadU(d, src + j + N), vm);
    Exp0Pair(d, y0, y1);
    hn::StoreU(y0, d, dst + j);
    hn::StoreU(y1, d, dst + j + N);
    s0 = hn::Add(s0, y0);
    s1 = hn::Add(s1, y1);
  }
  for (; j < n; j += N) {  // tail: through a buffer padded with -inf (whose exp is 0)
    alignas(64) T buf[64 / sizeof(T)];
    const int64_t r = std::min(N, n - j);
    for (int64_t t = 0; t < N; ++t) buf[t] = t < r ? src[j + t] - m : -std::numeric_limits<T>::infinity();
    auto y = hn::LoadU(d, buf), unused = hn::Zero(d);
    Exp0Pair(d, y, unused);
    hn::StoreU(y, d, buf);
    std::copy(buf, buf + r, dst + j);
    s0 = hn::Add(s0, y);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
}
float ExpShiftedF32(const float* s, float* d, int64_t n, float m) { return ExpShifted(s, d, n, m); }
double ExpShiftedF64(const double* s, double* d, int64_t n, double m) { return ExpShifted(s, d, n, m); }
// ExpShifted of nr rows in place, one call per block: the per-call cost (dispatch, constants, spills) is ~15 % of a
// 128-value row.
template <class T>
void ExpShiftedRows(T* s, int64_t ld, int64_t nr, int64_t n, const T* m, T* sums) {
  for (int64_t r = 0; r < nr; ++r) sums[r] = ExpShifted(s + r * ld, s + r * ld, n, m[r]);
}
void ExpShiftedRowsF32(float* s, int64_t ld, int64_t nr, int64_t n, const float* m, float* sums) {
  ExpShiftedRows(s, ld, nr, n, m, sums);
}
void ExpShiftedRowsF64(double* s, int64_t ld, int64_t nr, int64_t n, const double* m, double* sums) {
  ExpShiftedRows(s, ld, nr, n, m, sums);
}

template <class T>
void ExpN(const T* x, T* y, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(Exp0(d, hn::LoadU(d, x + j)), d, y + j);
  for (; j < n; ++j) {
    alignas(64) T buf[64 / sizeof(T)] = {};
    buf[0] = x[j];
    hn::StoreU(Exp0(d, hn::LoadU(d, buf)), d, buf);
    y[j] = buf[0];
  }
}
void ExpF32(const float* x, float* y, int64_t n) { ExpN(x, y, n); }
void ExpF64(const double* x, double* y, int64_t n) { ExpN(x, y, n); }

// max(m, s[..]) skipping NaN: a lane is replaced only when the new value compares greater.
template <class T>
T RowMax(const T* s, int64_t n, T m) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto acc = hn::Set(d, -std::numeric_limits<T>::infinity());
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto x = hn::LoadU(d, s + j);
    acc = hn::IfThenElse(hn::Lt(acc, x), x, acc);
  }
  T mx = hn::GetLane(hn::MaxOfLanes(d, acc));
  for (; j < n; ++j) mx = mx < s[j] ? s[j] : mx;
  return mx > m ? mx : m;
}
float RowMaxF32(const float* s, int64_t n, float m) { return RowMax(s, n, m); }
double RowMaxF64(const double* s, int64_t n, double m) { return RowMax(s, n, m); }

// s[j] *= scale and the max of the products (NaN skipped, -inf for n = 0): the scorer's scale and the row max in
// one pass over the score row instead of two.
template <class T>
T ScaleMax(T* s, int64_t n, T scale) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, scale);
  auto acc0 = hn::Set(d, -std::numeric_limits<T>::infinity()), acc1 = acc0;
  int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    const auto x0 = hn::Mul(hn::LoadU(d, s + j), vs), x1 = hn::Mul(hn::LoadU(d, s + j + N), vs);
    hn::StoreU(x0, d, s + j);
    hn::StoreU(x1, d, s + j + N);
    acc0 = hn::IfThenElse(hn::Lt(acc0, x0), x0, acc0);
    acc1 = hn::IfThenElse(hn::Lt(acc1, x1), x1, acc1);
  }
  acc0 = hn::IfThenElse(hn::Lt(acc0, acc1), acc1, acc0);
  T mx = hn::GetLane(hn::MaxOfLanes(d, acc0));
  for (; j < n; ++j) {
    s[j] *= scale;
    mx = mx < s[j] ? s[j] : mx;
  }
  return mx;
}
float ScaleMaxF32(float* s, int64_t n, float scale) { return ScaleMax(s, n, scale); }
double ScaleMaxF64(double* s, int64_t n, double scale) { return ScaleMax(s, n, scale); }

// The FMA peak: 12 independent multiply-add chains (enough to cover latency x throughput on current x86 cores).
constexpr int kChains = 12;
int64_t FmaFlopsPerIter() { return 2 * kChains * static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())); }
float FmaChains(int64_t iters) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  V c[kChains];
  for (int i = 0; i < kChains; ++i) c[i] = hn::Set(d, static_cast<float>(i));
  const V a = hn::Set(d, 0.999999f), b = hn::Set(d, 1e-6f);
  for (int64_t t = 0; t < iters; ++t)
    for (int i = 0; i < kChains; ++i) c[i] = hn::MulAdd(c[i], a, b);
  for (int i = 1; i < kChains; ++i) c[0] = hn::Add(c[0], c[i]);
  return hn::GetLane(c[0]);
}

template <class Half, class Scalar>
void Widen(const uint16_t* src, float* dst, int64_t n, Scalar scalar) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<Half, decltype(df)> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const Half* h = reinterpret_cast<const Half*>(src);
  int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, h + j)), df, dst + j);
  for (; j < n; ++j) dst[j] = scalar(src[j]);
}
void WidenBF16(const uint16_t* src, float* dst, int64_t n) { Widen<hwy::bfloat16_t>(src, dst, n, bf16_bits_to_float); }
void WidenF16(const uint16_t* src, float* dst, int64_t n) { Widen<hwy::float16_t>(src, dst, n, half_bits_to_float); }

// float -> bf16 bits rounded to nearest even, NaN quieted with its sign and top payload bits: exactly
// float_to_bf16_bits (attncheck/problem.hpp), eight or sixteen at a time.
void NarrowBF16(const float* src, uint16_t* dst, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(df)> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto x = hn::BitCast(du, hn::LoadU(df, src + j));
    const auto mag = hn::BitCast(di, hn::And(x, hn::Set(du, 0x7fffffffu)));  // >= 0: a signed compare will do
    const auto nan = hn::RebindMask(du, hn::Gt(mag, hn::Set(di, 0x7f800000)));
    const auto lsb = hn::And(hn::ShiftRight<16>(x), hn::Set(du, 1u));
    const auto rounded = hn::ShiftRight<16>(hn::Add(x, hn::Add(hn::Set(du, 0x7fffu), lsb)));
    const auto quiet = hn::Or(hn::ShiftRight<16>(x), hn::Set(du, 0x40u));
    const auto bits = hn::IfThenElse(nan, quiet, rounded);  // <= 0xffff: the saturating narrowing is exact
    hn::StoreU(hn::DemoteTo(dh, hn::BitCast(di, bits)), dh, dst + j);
  }
  for (; j < n; ++j) dst[j] = float_to_bf16_bits(src[j]);
}

}  // namespace attncheck::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "simd.hpp"

namespace attncheck::cpu::simd {
HWY_EXPORT(StripWidthF32);
HWY_EXPORT(StripWidthF64);
HWY_EXPORT(TargetBit);
HWY_EXPORT(GemmF32);
HWY_EXPORT(GemmF64);
HWY_EXPORT(GemmNTF32);
HWY_EXPORT(GemmNTF64);
HWY_EXPORT(GemmBF16);
HWY_EXPORT(GemmF16);
HWY_EXPORT(GemmNTBF16);
HWY_EXPORT(GemmNTF16);
HWY_EXPORT(GemmCodes);
HWY_EXPORT(GemmNTCodes);
HWY_EXPORT(DequantizeCodes);
HWY_EXPORT(ExpShiftedF32);
HWY_EXPORT(ExpShiftedF64);
HWY_EXPORT(ExpShiftedRowsF32);
HWY_EXPORT(ExpShiftedRowsF64);
HWY_EXPORT(ExpF32);
HWY_EXPORT(ExpF64);
HWY_EXPORT(RowMaxF32);
HWY_EXPORT(RowMaxF64);
HWY_EXPORT(ScaleMaxF32);
HWY_EXPORT(ScaleMaxF64);
HWY_EXPORT(WidenBF16);
HWY_EXPORT(WidenF16);
HWY_EXPORT(NarrowBF16);
HWY_EXPORT(FmaFlopsPerIter);
HWY_EXPORT(FmaChains);

namespace {
std::string lower_name(int64_t bit) {
  std::string s = hwy::TargetName(bit);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::vector<std::string> names(int64_t bits) {
  std::vector<std::string> v;
  for (int64_t b = bits; b != 0; b &= b - 1) v.push_back(lower_name(b & -b));
  return v;  // Highway's better targets have lower bits: best first
}
std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
// What this CPU runs, before ATTNCHECK_ISA narrows it.
int64_t detected() {
  static const int64_t bits = hwy::SupportedTargets() & HWY_TARGETS;
  return bits;
}
// The pseudo-target avx3_bf16 (bf16_dot.cpp): the best runnable AVX-512 target plus AVX512-BF16.
constexpr const char* kBf16Name = "avx3_bf16";
int64_t avx3_family() {
  int64_t m = HWY_AVX3 | HWY_AVX3_DL;
#ifdef HWY_AVX3_ZEN4
  m |= HWY_AVX3_ZEN4;  // later Highway versions
#endif
#ifdef HWY_AVX3_SPR
  m |= HWY_AVX3_SPR;
#endif
  return m;
}
int64_t best_avx3() {
  const int64_t b = detected() & avx3_family();
  return b & -b;
}
bool bf16_runnable_here() { return best_avx3() != 0 && bf16_dot_runnable(); }
bool g_bf16_dot = false;
}  // namespace

bool bf16_dot() {
  select_target();
  return g_bf16_dot;
}

void select_target() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    const int64_t runnable = detected();
    const char* env = std::getenv("ATTNCHECK_ISA");
    if (env == nullptr || *env == '\0') {
      g_bf16_dot = bf16_runnable_here() && (runnable & -runnable) == best_avx3();
      return;
    }
    std::string want = env;
    for (char& c : want) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (want == kBf16Name && bf16_runnable_here()) {
      hwy::DisableTargets(~best_avx3());
      g_bf16_dot = true;
      return;
    }
    for (int64_t b = runnable; b != 0; b &= b - 1)
      if (lower_name(b & -b) == want) {
        hwy::DisableTargets(~(b & -b));  // dispatch now has exactly this target to choose
        return;
      }
    error = std::string("ATTNCHECK_ISA: '") + env +
            "' is not a target this CPU can run from this binary (runnable: " + joined(runnable_targets()) +
            "; compiled: " + joined(compiled_targets()) + ")";
  });
  if (!error.empty()) throw std::invalid_argument(error);
}

std::string target() {
  select_target();
  return g_bf16_dot ? kBf16Name : lower_name(HWY_DYNAMIC_DISPATCH(TargetBit)());
}
std::vector<std::string> compiled_targets() {
  std::vector<std::string> v = names(HWY_TARGETS);
  if ((HWY_TARGETS & avx3_family()) != 0 && bf16_dot_compiled()) v.insert(v.begin(), kBf16Name);
  return v;
}
std::vector<std::string> runnable_targets() {
  std::vector<std::string> v = names(detected());
  if (bf16_runnable_here()) v.insert(v.begin(), kBf16Name);
  return v;
}

template <>
int64_t strip_width<float>() {
  select_target();
  return HWY_DYNAMIC_DISPATCH(StripWidthF32)();
}
int64_t float_lanes() { return strip_width<float>() / 2; }
template <>
int64_t strip_width<double>() {
  select_target();
  return HWY_DYNAMIC_DISPATCH(StripWidthF64)();
}
template <>
void gemm<float>(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t bstride,
                 int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(GemmF32)(m, n, k, A, lda, B, bstride, ldb, C, ldc, accumulate);
}
template <>
void gemm<double>(int64_t m, int64_t n, int64_t k, const double* A, int64_t lda, const double* B, int64_t bstride,
                  int64_t ldb, double* C, int64_t ldc, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(GemmF64)(m, n, k, A, lda, B, bstride, ldb, C, ldc, accumulate);
}
template <>
void gemm_nt<float>(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                    int64_t ldc) {
  HWY_DYNAMIC_DISPATCH(GemmNTF32)(m, n, k, A, lda, B, ldb, C, ldc);
}
template <>
void gemm_nt<double>(int64_t m, int64_t n, int64_t k, const double* A, int64_t lda, const double* B, int64_t ldb,
                     double* C, int64_t ldc) {
  HWY_DYNAMIC_DISPATCH(GemmNTF64)(m, n, k, A, lda, B, ldb, C, ldc);
}
template <>
void exp<float>(const float* x, float* y, int64_t n) {
  select_target();
  HWY_DYNAMIC_DISPATCH(ExpF32)(x, y, n);
}
template <>
void exp<double>(const double* x, double* y, int64_t n) {
  select_target();
  HWY_DYNAMIC_DISPATCH(ExpF64)(x, y, n);
}
void gemm_half(Half16 t, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint16_t* B,
               int64_t bstride, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  if (t == Half16::bf16)
    HWY_DYNAMIC_DISPATCH(GemmBF16)(m, n, k, A, lda, B, bstride, ldb, C, ldc, accumulate);
  else
    HWY_DYNAMIC_DISPATCH(GemmF16)(m, n, k, A, lda, B, bstride, ldb, C, ldc, accumulate);
}
void gemm_nt_half(Half16 t, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint16_t* B,
                  int64_t ldb, float* C, int64_t ldc) {
  if (t == Half16::bf16)
    HWY_DYNAMIC_DISPATCH(GemmNTBF16)(m, n, k, A, lda, B, ldb, C, ldc);
  else
    HWY_DYNAMIC_DISPATCH(GemmNTF16)(m, n, k, A, lda, B, ldb, C, ldc);
}
void gemm_codes(const Codes8& c, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint8_t* B,
                int64_t ldb, const float* scales, float* C, int64_t ldc, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(GemmCodes)(c, m, n, k, A, lda, B, ldb, scales, C, ldc, accumulate);
}
void dequantize_codes(const Codes8& c, const uint8_t* B, int64_t ldb, const float* scales, int64_t n, int64_t k,
                      float* dst) {
  HWY_DYNAMIC_DISPATCH(DequantizeCodes)(c, B, ldb, scales, n, k, dst);
}
void gemm_nt_codes(const Codes8& c, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint8_t* B,
                   int64_t ldb, const float* scales, float* C, int64_t ldc) {
  HWY_DYNAMIC_DISPATCH(GemmNTCodes)(c, m, n, k, A, lda, B, ldb, scales, C, ldc);
}
template <>
float exp_shifted<float>(const float* s, float* d, int64_t n, float m) {
  return HWY_DYNAMIC_DISPATCH(ExpShiftedF32)(s, d, n, m);
}
template <>
double exp_shifted<double>(const double* s, double* d, int64_t n, double m) {
  return HWY_DYNAMIC_DISPATCH(ExpShiftedF64)(s, d, n, m);
}
template <>
void exp_shifted_rows<float>(float* s, int64_t ld, int64_t nr, int64_t n, const float* m, float* sums) {
  if (n > 0)
    HWY_DYNAMIC_DISPATCH(ExpShiftedRowsF32)(s, ld, nr, n, m, sums);
  else
    std::fill(sums, sums + nr, 0.0f);
}
template <>
void exp_shifted_rows<double>(double* s, int64_t ld, int64_t nr, int64_t n, const double* m, double* sums) {
  if (n > 0)
    HWY_DYNAMIC_DISPATCH(ExpShiftedRowsF64)(s, ld, nr, n, m, sums);
  else
    std::fill(sums, sums + nr, 0.0);
}
template <>
float row_max<float>(const float* s, int64_t n, float m) {
  return HWY_DYNAMIC_DISPATCH(RowMaxF32)(s, n, m);
}
template <>
double row_max<double>(const double* s, int64_t n, double m) {
  return HWY_DYNAMIC_DISPATCH(RowMaxF64)(s, n, m);
}
template <>
float scale_max<float>(float* s, int64_t n, float scale) {
  return HWY_DYNAMIC_DISPATCH(ScaleMaxF32)(s, n, scale);
}
template <>
double scale_max<double>(double* s, int64_t n, double scale) {
  return HWY_DYNAMIC_DISPATCH(ScaleMaxF64)(s, n, scale);
}
void widen_bf16(const uint16_t* src, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(WidenBF16)(src, dst, n); }
void widen_f16(const uint16_t* src, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(WidenF16)(src, dst, n); }
void narrow_bf16(const float* src, uint16_t* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(NarrowBF16)(src, dst, n); }
int64_t fma_flops_per_iter() {
  select_target();
  return HWY_DYNAMIC_DISPATCH(FmaFlopsPerIter)();
}
float fma_chains(int64_t iters) {
  select_target();
  return HWY_DYNAMIC_DISPATCH(FmaChains)(iters);
}

}  // namespace attncheck::cpu::simd
#endif  // HWY_ONCE
