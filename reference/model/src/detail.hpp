// Small helpers shared by the problem-model sources (not installed): the error thrower and the
// round-to-odd step that makes fp16/bf16 rounding from double a single rounding.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace attncheck::inline model::detail {

[[noreturn]] inline void fail(const std::string& msg) { throw std::invalid_argument(msg); }

inline constexpr int64_t kMaxElements = int64_t{1} << 60;  // per tensor, and the bound on offsets and windows

// double -> float rounded to odd (see dtype.cpp).
float to_float_odd(double x);

// double -> int8 code: nearest, ties to even, saturated to [-128, 127] as a quantizer clamps; NaN (int8 has no
// NaN) becomes 0.
inline int8_t to_int8(double x) {
  if (std::isnan(x)) return 0;
  const double r = std::nearbyint(std::clamp(x, -128.0, 127.0));  // the default rounding mode: ties to even
  return static_cast<int8_t>(r);
}
// A byte of two 4-bit codes (DType::q4_0 / q4_1 elements): nearest integer in [0, 255], NaN as 0.
inline uint8_t to_byte(double x) {
  if (std::isnan(x)) return 0;
  return static_cast<uint8_t>(std::nearbyint(std::clamp(x, 0.0, 255.0)));
}

}  // namespace attncheck::inline model::detail
