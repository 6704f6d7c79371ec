// Chooses the kernel instantiation and launch geometry for a problem, for both callers: the device backend
// (nvcc, launches with <<<>>>) and the emulated one (g++, emu::launch). Tile sizes are compile-time parameters.
#pragma once

#include "attn_flash.cuh"
#include "attn_naive.cuh"

namespace attncheck::cuda {

enum class KernelVersion { naive = 1, flash = 2 };
enum class ElemType { f32, f16, bf16 };

// Largest head dim the fused kernel takes (accumulators per lane: 256 / 32 = 8).
constexpr int kMaxHeadDim = 256;
// The flash tiles: BR = 4 rows (warps) per block; BC = 32 keys per tile up to head dim 128, 16 above, so the block
// stays under the 48 KiB of dynamic shared memory that needs no opt-in on any device.
constexpr int kFlashRows = 4;

inline namespace ATTNCHECK_KERNEL_NS {

struct KernelLaunch {
  void (*fn)(AttnParams);
  dim3 grid, block;
  size_t smem;
  const char* name;
};

template <class T>
KernelLaunch plan_for(const AttnParams& p, KernelVersion v) {
  if (v == KernelVersion::naive) {
    const int64_t rows = static_cast<int64_t>(p.B) * p.Hq * p.Lq;
    return {&attn_naive_kernel<T>, dim3(static_cast<unsigned>((rows + kNaiveRowsPerBlock - 1) / kNaiveRowsPerBlock)),
            dim3(32 * kNaiveRowsPerBlock), 0, "naive"};
  }
  const dim3 grid(static_cast<unsigned>((p.Lq + kFlashRows - 1) / kFlashRows), static_cast<unsigned>(p.B * p.Hq));
  const dim3 block(32 * kFlashRows);
  const int dmax = p.Dqk > p.Dv ? p.Dqk : p.Dv;
  if (dmax <= 64)
    return {&attn_flash_kernel<T, kFlashRows, 32, 2>, grid, block, flash_smem_bytes<kFlashRows, 32>(p.Dqk, p.Dv),
            "flash<4,32,2>"};
  if (dmax <= 128)
    return {&attn_flash_kernel<T, kFlashRows, 32, 4>, grid, block, flash_smem_bytes<kFlashRows, 32>(p.Dqk, p.Dv),
            "flash<4,32,4>"};
  return {&attn_flash_kernel<T, kFlashRows, 16, 8>, grid, block, flash_smem_bytes<kFlashRows, 16>(p.Dqk, p.Dv),
          "flash<4,16,8>"};
}

inline KernelLaunch plan_launch(const AttnParams& p, ElemType t, KernelVersion v) {
  switch (t) {
    case ElemType::f32: return plan_for<float>(p, v);
    case ElemType::f16: return plan_for<__half>(p, v);
    case ElemType::bf16: return plan_for<__nv_bfloat16>(p, v);
  }
  return plan_for<float>(p, v);
}

}  // inline namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
