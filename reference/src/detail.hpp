// Small helpers shared by the problem-model sources (not installed): the error thrower and the
// round-to-odd step that makes fp16/bf16 rounding from double a single rounding.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace attncheck::detail {

[[noreturn]] inline void fail(const std::string& msg) { throw std::invalid_argument(msg); }

inline constexpr int64_t kMaxElements = int64_t{1} << 60;  // per tensor, and the bound on offsets and windows

// double -> float rounded to odd (see dtype.cpp).
float to_float_odd(double x);

}  // namespace attncheck::detail
