// The emulated kernels use cuda_fp16.h / cuda_bf16.h host code for fp16 and bf16. Checked exactly against
// attncheck's own conversions (problem.hpp) over all 65,536 bit patterns, both directions: every pattern to
// float, every exact value back, and the rounding boundaries (midpoints between neighbours, and one float ulp
// to either side of them), so round-to-nearest-even, overflow, subnormals and NaN are all exercised.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "emu/simt.hpp"
#include "attncheck/problem.hpp"

namespace {

uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

uint16_t cuda_f2h(float f) {
  const __half_raw r = __half_raw(__float2half_rn(f));
  return r.x;
}
float cuda_h2f(uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}
uint16_t cuda_f2bf(float f) {
  const __nv_bfloat16_raw r = __nv_bfloat16_raw(__float2bfloat16_rn(f));
  return r.x;
}
float cuda_bf2f(uint16_t h) {
  __nv_bfloat16_raw r;
  r.x = h;
  return __bfloat162float(__nv_bfloat16(r));
}

// Same value, or both NaN (NaN payloads are not part of either contract).
void expect_same_float(float want, float got, const char* what, uint32_t pattern) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << " pattern 0x" << std::hex << pattern;
  } else {
    EXPECT_EQ(float_bits(want), float_bits(got))
        << what << " pattern 0x" << std::hex << pattern << ": want " << want << " got " << got;
  }
}
void expect_same_bits16(uint16_t want, uint16_t got, bool nan_ok, const char* what, float input) {
  if (nan_ok) return;
  EXPECT_EQ(want, got) << what << " input " << input << " (0x" << std::hex << float_bits(input) << ")";
}

template <class ToFloat, class FromFloat, class RefToFloat, class RefFromFloat>
int64_t check_all(ToFloat to_float, FromFloat from_float, RefToFloat ref_to_float, RefFromFloat ref_from_float,
                  const char* name) {
  int64_t checked = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float ref = ref_to_float(bits);
    expect_same_float(ref, to_float(bits), name, h);
    // Exact values convert back to themselves; NaN stays NaN.
    const uint16_t back = from_float(ref);
    if (std::isnan(ref))
      EXPECT_TRUE(std::isnan(ref_to_float(back))) << name << " NaN 0x" << std::hex << h;
    else
      EXPECT_EQ(back, ref_from_float(ref)) << name << " value " << ref;
    ++checked;
    // Boundaries between this value and the next one up in magnitude (same sign).
    const uint16_t next = static_cast<uint16_t>(h + 1);
    if ((h & 0x7fffu) >= 0x7f80u || (next & 0x7fffu) == 0) continue;  // inf/NaN region, or sign wrap
    const float a = ref, b = ref_to_float(next);
    if (!std::isfinite(a) || !std::isfinite(b)) continue;
    const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);  // exact in fp32 for both formats
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, mid * 2)}) {
      const uint16_t want = ref_from_float(x);
      expect_same_bits16(want, from_float(x), false, name, x);
      ++checked;
    }
  }
  // Overflow: the largest finite values and just beyond, both signs; infinities and NaN.
  for (float x :
       {65504.f, 65519.99f, 65520.f, 1e30f, 3.4e38f, -65520.f, INFINITY, -INFINITY, 1e-8f, 2.98e-8f, -5.9604645e-8f}) {
    expect_same_bits16(ref_from_float(x), from_float(x), false, name, x);
    ++checked;
  }
  EXPECT_TRUE(std::isnan(ref_to_float(from_float(NAN))));
  return checked;
}

}  // namespace

TEST(CudaFp16, HostConversionsMatchAttncheckOnAllPatterns) {
  const int64_t n = check_all(cuda_h2f, cuda_f2h, attncheck::half_bits_to_float, attncheck::float_to_half_bits, "fp16");
  EXPECT_GT(n, 65536 * 3);
}

TEST(CudaBf16, HostConversionsMatchAttncheckOnAllPatterns) {
  const int64_t n =
      check_all(cuda_bf2f, cuda_f2bf, attncheck::bf16_bits_to_float, attncheck::float_to_bf16_bits, "bf16");
  EXPECT_GT(n, 65536 * 3);
}
