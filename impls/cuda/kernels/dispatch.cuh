// Chooses the kernel instantiation and launch geometry for a problem, for both callers: the device backend
// (nvcc, launches with <<<>>>) and the emulated one (g++, emu::launch). Tile sizes are compile-time parameters.
#pragma once

#include "attn_flash.cuh"
#include "attn_naive.cuh"

namespace attncheck::cuda {

enum class KernelVersion { naive = 1, flash = 2 };
enum class ElemType { f32, f16, bf16, f64 };

// Largest head dim of the backward kernels (accumulators per lane: 256 / 32 = 8).
constexpr int kMaxHeadDim = 256;
// Largest head dim of the forward kernels: an absorbed MLA latent head (DeepSeek: Dqk 576 = 512 + 64, Dv 512) with
// 576 / 32 = 18 accumulators per lane in kernel 2.
constexpr int kMaxForwardHeadDim = 576;
// The flash tiles: BR = 4 rows (warps) per block; BC keys per tile shrinks as head dims and the accumulation type
// grow, so the block stays under the 48 KiB of dynamic shared memory that needs no opt-in on any device.
constexpr int kFlashRows = 4;

inline namespace ATTNCHECK_KERNEL_NS {

struct KernelLaunch {
  void (*fn)(AttnParams);
  dim3 grid, block;
  size_t smem;
  const char* name;
};

template <class T, int BC, int NV>
KernelLaunch flash_launch(const AttnParams& p, const char* name) {
  using Acc = typename AccOf<T>::type;
  const dim3 grid(static_cast<unsigned>((p.Lq + kFlashRows - 1) / kFlashRows), static_cast<unsigned>(p.B * p.Hq));
  return {&attn_flash_kernel<T, kFlashRows, BC, NV>, grid, dim3(32 * kFlashRows),
          flash_smem_bytes<Acc, kFlashRows, BC>(p.Dqk, p.Dv), name};
}

template <class T>
KernelLaunch plan_for(const AttnParams& p, KernelVersion v) {
  if (v == KernelVersion::naive) {
    const int64_t rows = static_cast<int64_t>(p.B) * p.Hq * p.Lq;
    return {&attn_naive_kernel<T>, dim3(static_cast<unsigned>((rows + kNaiveRowsPerBlock - 1) / kNaiveRowsPerBlock)),
            dim3(32 * kNaiveRowsPerBlock), 0, "naive"};
  }
  const int dmax = p.Dqk > p.Dv ? p.Dqk : p.Dv;
  if constexpr (sizeof(typename AccOf<T>::type) == 8) {  // fp64: half the keys per tile for the same shared memory
    if (dmax <= 64) return flash_launch<T, 32, 2>(p, "flash<4,32,2>");
    if (dmax <= 128) return flash_launch<T, 16, 4>(p, "flash<4,16,4>");
    if (dmax <= 256) return flash_launch<T, 8, 8>(p, "flash<4,8,8>");
    return flash_launch<T, 2, 18>(p, "flash<4,2,18>");
  }
  if (dmax <= 64) return flash_launch<T, 32, 2>(p, "flash<4,32,2>");
  if (dmax <= 128) return flash_launch<T, 32, 4>(p, "flash<4,32,4>");
  if (dmax <= 256) return flash_launch<T, 16, 8>(p, "flash<4,16,8>");
  return flash_launch<T, 8, 18>(p, "flash<4,8,18>");
}

inline KernelLaunch plan_launch(const AttnParams& p, ElemType t, KernelVersion v) {
  switch (t) {
    case ElemType::f32: return plan_for<float>(p, v);
    case ElemType::f16: return plan_for<__half>(p, v);
    case ElemType::bf16: return plan_for<__nv_bfloat16>(p, v);
    case ElemType::f64: return plan_for<double>(p, v);
  }
  return plan_for<float>(p, v);
}

}  // namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
