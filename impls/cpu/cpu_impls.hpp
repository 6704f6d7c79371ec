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
// Head dims <= 64 (both): tiles of 48 x 256. The per-row and per-block costs (calls, row sums, loop exits) are
// spread over twice the keys, and the K/V blocks are no larger than 96 x 128's at D = 128. Single thread,
// 1x1x4096x4096x64 fp32: 3 % less CPU time than 96 x 128.
inline constexpr int64_t kFlashBlockQSmallD = 48;  // a multiple of the GEMM tile rows and of kGroupRows (24)
inline constexpr int64_t kFlashBlockKSmallD = 256;
}  // namespace attncheck::cpu
