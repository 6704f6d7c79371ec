// Element types: names, sizes, unit roundoffs, and IEEE fp16/bf16 conversions that round once, to nearest even.
#include <cmath>
#include <cstring>

#include "attncheck/problem.hpp"
#include "detail.hpp"

namespace attncheck {

using detail::fail;

// ---- dtypes ------------------------------------------------------------------------------------------------
const char* to_string(DType t) {
  switch (t) {
    case DType::f64: return "fp64";
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::u8: return "u8";
  }
  return "?";
}

DType dtype_from_string(const std::string& s) {
  if (s == "fp64" || s == "f64" || s == "float64") return DType::f64;
  if (s == "fp32" || s == "f32" || s == "float32") return DType::f32;
  if (s == "fp16" || s == "f16" || s == "float16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "u8" || s == "bool") return DType::u8;
  fail("dtype: unknown value '" + s + "' (expected fp64, fp32, fp16, bf16)");
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

double unit_roundoff(DType t) {
  switch (t) {
    case DType::f64: return std::ldexp(1.0, -53);
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::u8: return 0.5;
  }
  return 0;
}

uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | (absx > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absx < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // value = absx_float; half subnormal unit is 2^-24. Round absx_float / 2^-24 to nearest even.
    float a;
    std::memcpy(&a, &absx, 4);
    const float scaled = a * 16777216.0f;  // exact: multiplication by a power of two
    const float r = std::nearbyint(scaled);  // default rounding mode: to nearest even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  // Normal: rebias exponent from 127 to 15 and round the 23-bit mantissa to 10 bits, nearest even.
  uint32_t m = absx - (112u << 23);  // exponent - 112
  const uint32_t lsb = (m >> 13) & 1u;
  m += 0xfffu + lsb;
  return static_cast<uint16_t>(sign | (m >> 13));
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(man), -24);
    uint32_t b;
    std::memcpy(&b, &out, 4);
    b |= sign;
    std::memcpy(&out, &b, 4);
    return out;
  }
  uint32_t b = (exp == 31) ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112u) << 23) | (man << 13));
  std::memcpy(&out, &b, 4);
  return out;
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

float bf16_bits_to_float(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &b, 4);
  return out;
}

// double -> float rounded to odd: when inexact, the neighbour with an odd last bit. fp32 carries more than two bits
// beyond fp16's and bf16's mantissas, so rounding this float to nearest-even once more equals rounding the double
// directly (no double rounding: 1 + 2^-11 + 2^-40 must become fp16 1 + 2^-10, not the tie 1 + 2^-11 -> 1).
float detail::to_float_odd(double x) {
  float f = static_cast<float>(x);
  if (std::isnan(x) || static_cast<double>(f) == x) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 1u) == 0) f = std::nextafter(f, static_cast<double>(f) < x ? INFINITY : -INFINITY);  // toward x
  return f;
}

double round_to(DType t, double x) {
  switch (t) {
    case DType::f64: return x;
    case DType::f32: return static_cast<float>(x);
    case DType::f16: return half_bits_to_float(float_to_half_bits(detail::to_float_odd(x)));
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(detail::to_float_odd(x)));
    case DType::u8: return x != 0 ? 1.0 : 0.0;
  }
  return x;
}

}  // namespace attncheck
