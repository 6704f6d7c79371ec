// The backward pass's launches for both callers (device: <<<>>>, emulation: emu::launch), in order: row statistics,
// dK/dV, dQ (+ dS), and dBias when there is a bias. Tile sizes keep every block within the 48 KiB of dynamic shared
// memory that needs no opt-in, for head dims up to kMaxHeadDim.
#pragma once

#include <vector>

#include "attn_bwd_kv.cuh"
#include "attn_bwd_q.cuh"
#include "dispatch.cuh"

namespace attncheck::cuda {

constexpr int kBwdKeysPerBlock = 4;  // warps (keys) per dK/dV block
constexpr int kBwdQRows = 4;         // warps (query rows) per dQ block

inline namespace ATTNCHECK_KERNEL_NS {

struct BwdLaunch {
  void (*fn)(BwdParams);
  dim3 grid, block;
  size_t smem;
  const char* name;
};

template <class T, int RT, int BC, int NV>
std::vector<BwdLaunch> bwd_launches(const BwdParams& bp, const char* kv_name, const char* q_name) {
  using Acc = typename AccOf<T>::type;
  const AttnParams& p = bp.a;
  const int64_t rows = static_cast<int64_t>(p.B) * p.Hq * p.Lq;
  std::vector<BwdLaunch> l;
  l.push_back({&attn_bwd_rowstats_kernel<T>,
               dim3(static_cast<unsigned>((rows + kBwdRowsPerBlock - 1) / kBwdRowsPerBlock)),
               dim3(32 * kBwdRowsPerBlock), 0, "bwd-rowstats"});
  l.push_back({&attn_bwd_kv_kernel<T, kBwdKeysPerBlock, RT, NV>,
               dim3(static_cast<unsigned>((p.Lk + kBwdKeysPerBlock - 1) / kBwdKeysPerBlock),
                    static_cast<unsigned>(p.B * p.Hkv)),
               dim3(32 * kBwdKeysPerBlock), bwd_kv_smem_bytes<Acc, kBwdKeysPerBlock, RT>(p.Dqk, p.Dv), kv_name});
  l.push_back({&attn_bwd_q_kernel<T, kBwdQRows, BC, NV>,
               dim3(static_cast<unsigned>((p.Lq + kBwdQRows - 1) / kBwdQRows), static_cast<unsigned>(p.B * p.Hq)),
               dim3(32 * kBwdQRows), bwd_q_smem_bytes<Acc, kBwdQRows, BC>(p.Dqk, p.Dv), q_name});
  if (bp.dbias) {
    const int64_t n = bp.bias_shape[0] * bp.bias_shape[1] * bp.bias_shape[2] * bp.bias_shape[3];
    l.push_back({&attn_bwd_dbias_kernel<T>, dim3(static_cast<unsigned>((n + kBwdBiasThreads - 1) / kBwdBiasThreads)),
                 dim3(kBwdBiasThreads), 0, "bwd-dbias"});
  }
  return l;
}

// dK/dV: RT query rows per tile; dQ: BC keys per tile. Both shrink as head dims and the accumulation type grow.
template <class T>
std::vector<BwdLaunch> bwd_plan_for(const BwdParams& bp) {
  const AttnParams& p = bp.a;
  const int dmax = p.Dqk > p.Dv ? p.Dqk : p.Dv;
  if constexpr (sizeof(typename AccOf<T>::type) == 8) {
    if (dmax <= 64) return bwd_launches<T, 32, 32, 2>(bp, "bwd-kv<4,32,2>", "bwd-q<4,32,2>");
    if (dmax <= 128) return bwd_launches<T, 16, 16, 4>(bp, "bwd-kv<4,16,4>", "bwd-q<4,16,4>");
    return bwd_launches<T, 4, 4, 8>(bp, "bwd-kv<4,4,8>", "bwd-q<4,4,8>");
  }
  if (dmax <= 64) return bwd_launches<T, 32, 32, 2>(bp, "bwd-kv<4,32,2>", "bwd-q<4,32,2>");
  if (dmax <= 128) return bwd_launches<T, 32, 32, 4>(bp, "bwd-kv<4,32,4>", "bwd-q<4,32,4>");
  return bwd_launches<T, 16, 16, 8>(bp, "bwd-kv<4,16,8>", "bwd-q<4,16,8>");
}

inline std::vector<BwdLaunch> plan_backward(const BwdParams& bp, ElemType t) {
  switch (t) {
    case ElemType::f32: return bwd_plan_for<float>(bp);
    case ElemType::f16: return bwd_plan_for<__half>(bp);
    case ElemType::bf16: return bwd_plan_for<__nv_bfloat16>(bp);
    case ElemType::f64: return bwd_plan_for<double>(bp);
  }
  return bwd_plan_for<float>(bp);
}

}  // namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
