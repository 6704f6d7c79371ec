// fp16 / bf16 conversions: every bit pattern round-trips through float, known values decode exactly, rounding is
// to nearest with ties to even (normal, subnormal, overflow), and doubles round once (no double rounding).
#include "tiny.hpp"

using namespace attncheck;

TEST(DType, EveryHalfBitPatternRoundTrips) {
  int nans = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    const bool is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
    if (is_nan) {
      ++nans;
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(f)))) << "NaN stays NaN " << std::hex << h;
    } else {
      ASSERT_EQ(float_to_half_bits(f), h) << std::hex << h;
    }
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(DType, EveryBfloat16BitPatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(h));
    if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0)
      ASSERT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(f)))) << std::hex << h;
    else
      ASSERT_EQ(float_to_bf16_bits(f), h) << std::hex << h;
  }
}

TEST(DType, HalfKnownValues) {
  EXPECT_EQ(half_bits_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_bits_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_bits_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(half_bits_to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(half_bits_to_float(0x7bff), 65504.0f);               // largest finite
  EXPECT_EQ(half_bits_to_float(0x7c00), INFINITY);
  EXPECT_TRUE(std::signbit(half_bits_to_float(0x8000)));
}

TEST(DType, HalfRoundsToNearestTiesToEven) {
  const float u = std::ldexp(1.0f, -11);  // half of the ulp of 1 in fp16
  EXPECT_EQ(float_to_half_bits(1.0f + u), 0x3c00) << "tie between 1 and 1+2^-10 goes to even 1";
  EXPECT_EQ(float_to_half_bits(1.0f + 3 * u), 0x3c02) << "tie between 1+2^-10 and 1+2^-9 goes to even";
  EXPECT_EQ(float_to_half_bits(1.0f + u + std::ldexp(1.0f, -20)), 0x3c01) << "just above the tie goes up";
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000) << "subnormal tie 0.5 ulp -> 0";
  EXPECT_EQ(float_to_half_bits(3 * std::ldexp(1.0f, -25)), 0x0002) << "subnormal tie 1.5 ulp -> 2";
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400) << "into the normals";
  EXPECT_EQ(float_to_half_bits(65519.0f), 0x7bff) << "below the overflow tie";
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00) << "the tie above 65504 overflows to inf (even)";
  EXPECT_EQ(float_to_half_bits(-1e6f), 0xfc00);
}

TEST(DType, Bfloat16RoundsToNearestTiesToEven) {
  const float u = std::ldexp(1.0f, -8);
  EXPECT_EQ(float_to_bf16_bits(1.0f + u), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * u), 0x3f82);
  EXPECT_EQ(float_to_bf16_bits(1.0f + u + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80) << "rounds up to inf";
  EXPECT_EQ(bf16_bits_to_float(0x3f81), 1.0f + std::ldexp(1.0f, -7));
}

TEST(DType, DoublesRoundOnceToHalfAndBfloat16) {
  // 1 + 2^-11 + 2^-40 is just above the fp16 tie: the nearest fp16 is 1 + 2^-10. Rounding to fp32 first would
  // land exactly on the tie (1 + 2^-11) and then go to even, 1.0: the double-rounding error this guards against.
  const double x = 1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(round_to(DType::f16, x), 1 + std::ldexp(1.0, -10));
  EXPECT_EQ(round_to(DType::f16, -x), -(1 + std::ldexp(1.0, -10)));
  const double y = 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  EXPECT_EQ(round_to(DType::bf16, y), 1 + std::ldexp(1.0, -7));
  // Storing into a tensor rounds the same way.
  Tensor t(DType::f16, {1, 1, 1, 1});
  t.put(0, 0, 0, 0, x);
  EXPECT_EQ(t.at(0, 0, 0, 0), 1 + std::ldexp(1.0, -10));
  Tensor b(DType::bf16, {1, 1, 1, 1});
  b.put(0, 0, 0, 0, y);
  EXPECT_EQ(b.at(0, 0, 0, 0), 1 + std::ldexp(1.0, -7));
  // Exact ties and exactly representable values are unaffected.
  EXPECT_EQ(round_to(DType::f16, 1 + std::ldexp(1.0, -11)), 1.0);
  EXPECT_EQ(round_to(DType::f16, 65520.0), INFINITY);
  EXPECT_EQ(round_to(DType::f16, 65519.999), 65504.0);
  EXPECT_EQ(round_to(DType::bf16, 1e300), INFINITY);
  EXPECT_EQ(round_to(DType::f16, std::ldexp(1.0, -25) + std::ldexp(1.0, -60)), std::ldexp(1.0, -24));
  EXPECT_TRUE(std::isnan(round_to(DType::f16, std::nan(""))));
}
