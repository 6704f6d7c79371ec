// Element types: names, sizes, unit roundoffs, and fp16/bf16/fp8 conversions that round once, to nearest even.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "attncheck/problem.hpp"
#include "detail.hpp"

namespace attncheck {
inline namespace model {

using detail::fail;

// ---- dtypes ------------------------------------------------------------------------------------------------
const char* to_string(DType t) {
  switch (t) {
    case DType::f64: return "fp64";
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::u8: return "u8";
    case DType::e4m3: return "fp8_e4m3";
    case DType::e5m2: return "fp8_e5m2";
    case DType::i8: return "int8";
    case DType::q4_0: return "q4_0";
    case DType::q4_1: return "q4_1";
  }
  return "?";
}

DType dtype_from_string(const std::string& s) {
  if (s == "fp64" || s == "f64" || s == "float64") return DType::f64;
  if (s == "fp32" || s == "f32" || s == "float32") return DType::f32;
  if (s == "fp16" || s == "f16" || s == "float16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "u8" || s == "bool") return DType::u8;
  if (s == "fp8_e4m3" || s == "e4m3" || s == "float8_e4m3fn") return DType::e4m3;
  if (s == "fp8_e5m2" || s == "e5m2" || s == "float8_e5m2") return DType::e5m2;
  if (s == "int8" || s == "i8") return DType::i8;
  if (s == "q4_0") return DType::q4_0;
  if (s == "q4_1") return DType::q4_1;
  fail("dtype: unknown value '" + s + "' (expected fp64, fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8, q4_0, q4_1)");
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::u8:
    case DType::e4m3:
    case DType::e5m2:
    case DType::i8:
    case DType::q4_0:
    case DType::q4_1: return 1;  // q4: a byte of two codes
  }
  return 0;
}

double unit_roundoff(DType t) {
  switch (t) {
    case DType::f64: return std::ldexp(1.0, -53);
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::u8:
    case DType::i8:
    case DType::q4_0:
    case DType::q4_1: return 0.5;  // integers: half a unit, absolute (no relative roundoff)
    case DType::e4m3: return std::ldexp(1.0, -4);
    case DType::e5m2: return std::ldexp(1.0, -3);
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
    const float scaled = a * 16777216.0f;    // exact: multiplication by a power of two
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
    case DType::e4m3:
    case DType::e5m2: return fp8_bits_to_double(double_to_fp8_bits(x, t), t);
    case DType::i8: return detail::to_int8(x);
    case DType::q4_0:
    case DType::q4_1: return detail::to_byte(x);
  }
  return x;
}

// ---- fp8 -----------------------------------------------------------------------------------------------------
namespace {
struct Fp8Format {
  int man;       // mantissa bits
  int bias;      // exponent bias
  int min_exp;   // exponent of the smallest normal value
  double max;    // largest finite value
  bool has_inf;  // e5m2: exponent field all ones = inf/NaN; e4m3fn: only S.1111.111 is NaN
};
Fp8Format format(DType t) {
  if (t == DType::e4m3) return {3, 7, -6, 448.0, false};
  return {2, 15, -14, 57344.0, true};
}
}  // namespace

double fp8_bits_to_double(uint8_t bits, DType t) {
  const Fp8Format f = format(t);
  const bool neg = bits & 0x80u;
  const int e = (bits & 0x7f) >> f.man, m = bits & ((1 << f.man) - 1);
  const int e_all = (1 << (7 - f.man)) - 1;
  double v;
  if (f.has_inf && e == e_all)
    v = m == 0 ? HUGE_VAL : std::nan("");
  else if (!f.has_inf && e == e_all && m == (1 << f.man) - 1)
    v = std::nan("");
  else if (e == 0)
    v = std::ldexp(static_cast<double>(m), f.min_exp - f.man);  // subnormal
  else
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.man), e - f.bias);
  return neg ? -v : v;
}

uint8_t double_to_fp8_bits(double x, DType t) {
  const Fp8Format f = format(t);
  const uint8_t sign = std::signbit(x) ? 0x80u : 0u;
  const uint8_t nan = 0x7fu;  // e5m2: S.11111.11; e4m3fn: S.1111.111
  if (std::isnan(x)) return static_cast<uint8_t>(sign | nan);
  const double a = std::abs(x);
  // Round |x| to the format's grid: the spacing is 2^(max(exponent, min_exp) - man); nearbyint ties to even, and
  // the scaling by a power of two is exact.
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): exponent e - 1
  const int q = std::max(e - 1, f.min_exp) - f.man;
  const double r = std::ldexp(std::nearbyint(std::ldexp(a, -q)), q);
  if (std::isinf(a) || r > f.max) return static_cast<uint8_t>(sign | (f.has_inf ? 0x7cu : nan));
  if (r == 0) return sign;
  std::frexp(r, &e);
  if (e - 1 < f.min_exp)  // subnormal: the mantissa counts spacings of 2^(min_exp - man)
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::ldexp(r, f.man - f.min_exp)));
  const uint32_t field = static_cast<uint32_t>(e - 1 + f.bias);
  const uint32_t man = static_cast<uint32_t>(std::ldexp(r, f.man - (e - 1))) - (1u << f.man);
  return static_cast<uint8_t>(sign | (field << f.man) | man);
}

}  // namespace model
}  // namespace attncheck
