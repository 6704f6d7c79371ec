// Factories of the two CPU implementations; make_cpu_impls() (cpu_impls.cpp) hands both to the registry.
#pragma once

#include "attncheck/impl.hpp"

namespace attncheck::cpu {
ImplPtr make_dense_impl();  // "cpu"        (cpu_dense.cpp)
ImplPtr make_flash_impl();  // "cpu-flash"  (cpu_flash.cpp)
}  // namespace attncheck::cpu

namespace attncheck::cpu {
// cpu-flash tiles: query rows per task and keys per block (tests use them to hit tails at block +- 1).
inline constexpr int64_t kFlashBlockQ = 96;   // a multiple of the GEMM tile rows (6 and 8)
inline constexpr int64_t kFlashBlockK = 128;  // a multiple of every SIMD strip width
}  // namespace attncheck::cpu
