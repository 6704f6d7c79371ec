// Backward pass 1, dK and dV (FlashAttention-2's outer loop over key blocks): a block owns KW keys of one
// (batch, KV head), one warp per key. It walks every query head of the GQA group and every query row in tiles of RT
// rows staged in shared memory (Q and dO); lane r recomputes the pair (row r, the warp's key) from the saved lse and
// D, then each lane accumulates its output dims over the tile: dV_j += Σ_r P'_rj dO_r, dK_j += Σ_r dR_rj q_r.
// Every key is summed by one warp in a fixed order: no atomics, the same bits in any thread order.
#pragma once

#include "attn_bwd_common.cuh"

namespace attncheck::cuda {
inline namespace ATTNCHECK_KERNEL_NS {

// Shared memory, accumulation type: Q tile [RT][Dqk], dO tile [RT][Dv], K [KW][Dqk], V [KW][Dv], and per warp the
// pair terms P' [KW][RT] and dR [KW][RT].
template <class Acc, int KW, int RT>
inline size_t bwd_kv_smem_bytes(int Dqk, int Dv) {
  return sizeof(Acc) * (static_cast<size_t>(RT + KW) * (Dqk + Dv) + 2u * KW * RT);
}

// KW keys (warps) per block, RT query rows per tile (RT <= 32: lane r takes row r), NV = max(Dqk, Dv)/32 rounded
// up: accumulator registers per lane (lane owns dims lane, lane + 32, ...).
template <class T, int KW, int RT, int NV>
__global__ void attn_bwd_kv_kernel(BwdParams bp) {
  static_assert(RT >= 1 && RT <= 32, "one query row per lane");
  using Acc = typename AccOf<T>::type;
  const AttnParams& p = bp.a;
  ATTNCHECK_DYNAMIC_SHARED(unsigned char, smem);
  Acc* sQ = reinterpret_cast<Acc*>(smem);  // [RT][Dqk]
  Acc* sdO = sQ + RT * p.Dqk;              // [RT][Dv]
  Acc* sK = sdO + RT * p.Dv;               // [KW][Dqk]
  Acc* sV = sK + KW * p.Dqk;               // [KW][Dv]
  Acc* sP = sV + KW * p.Dv;                // [KW][RT]
  Acc* sR = sP + KW * RT;                  // [KW][RT]

  const int tid = static_cast<int>(threadIdx.x), nthreads = KW * 32;
  const int warp = tid / 32, lane = tid % 32;
  const int bkv = static_cast<int>(blockIdx.y);
  const int b = bkv / p.Hkv, kvh = bkv % p.Hkv, group = p.Hq / p.Hkv;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * KW;
  const int64_t j = j0 + warp;
  const bool key_valid = j < p.Lk;  // warps past Lk still take part in every __syncthreads
  const int64_t off = gload(p.diag_offset, b), valid = gload(p.key_length, b);
  const Acc* lse = static_cast<const Acc*>(p.lse);
  const Acc* Drow = static_cast<const Acc*>(bp.d);

  for (int x = tid; x < KW * p.Dqk; x += nthreads) {
    const int r = x / p.Dqk, d = x % p.Dqk;
    sK[x] = j0 + r < p.Lk ? load_as<T>(p.k, offset4(p.k_stride, b, kvh, j0 + r, d)) : Acc(0);
  }
  for (int x = tid; x < KW * p.Dv; x += nthreads) {
    const int r = x / p.Dv, d = x % p.Dv;
    sV[x] = j0 + r < p.Lk ? load_as<T>(p.v, offset4(p.v_stride, b, kvh, j0 + r, d)) : Acc(0);
  }

  Acc dk_acc[NV], dv_acc[NV];
  for (int c = 0; c < NV; ++c) dk_acc[c] = dv_acc[c] = 0;

  for (int h = kvh * group; h < (kvh + 1) * group; ++h)
    for (int64_t i0 = 0; i0 < p.Lq; i0 += RT) {
      __syncthreads();  // the previous tile is consumed (and K, V are written)
      for (int x = tid; x < RT * p.Dqk; x += nthreads) {
        const int r = x / p.Dqk, d = x % p.Dqk;
        sQ[x] = i0 + r < p.Lq ? load_as<T>(p.q, offset4(p.q_stride, b, h, i0 + r, d)) : Acc(0);
      }
      for (int x = tid; x < RT * p.Dv; x += nthreads) {
        const int r = x / p.Dv, d = x % p.Dv;
        sdO[x] = i0 + r < p.Lq ? load_as<T>(bp.dout, offset4(bp.do_stride, b, h, i0 + r, d)) : Acc(0);
      }
      __syncthreads();
      if (!key_valid) continue;
      if (lane < RT) {
        const int64_t i = i0 + lane;
        PairGrad<Acc> g{Acc(0), Acc(0), Acc(0)};
        const int64_t row = (static_cast<int64_t>(b) * p.Hq + h) * p.Lq + i;
        if (i < p.Lq && gload(bp.live, row))
          g = pair_grad<Acc>(p, b, h, i, j, i + off, valid, sQ + lane * p.Dqk, sK + warp * p.Dqk, sdO + lane * p.Dv,
                             sV + warp * p.Dv, p.Dqk, p.Dv, gload(lse, row), gload(Drow, row));
        sP[warp * RT + lane] = g.pk;
        sR[warp * RT + lane] = g.dr;
      }
      __syncwarp();
      for (int c = 0; c < NV; ++c) {
        const int d = lane + 32 * c;
        Acc av = dv_acc[c], ak = dk_acc[c];
        for (int r = 0; r < RT; ++r) {  // a zero term never touches its row (q or dO may be NaN-poisoned)
          const Acc w = sP[warp * RT + r], rr = sR[warp * RT + r];
          if (d < p.Dv && w != Acc(0)) av = ac_fma(w, sdO[r * p.Dv + d], av);
          if (d < p.Dqk && rr != Acc(0)) ak = ac_fma(rr, sQ[r * p.Dqk + d], ak);
        }
        dv_acc[c] = av;
        dk_acc[c] = ak;
      }
      __syncwarp();  // sP/sR are rewritten by the next tile
    }

  if (!key_valid) return;
  const Acc scale = static_cast<Acc>(p.scale);
  for (int c = 0; c < NV; ++c) {
    const int d = lane + 32 * c;
    if (d < p.Dqk) store_as<T>(bp.dk, offset4(bp.dk_stride, b, kvh, j, d), scale * dk_acc[c]);
    if (d < p.Dv) store_as<T>(bp.dv, offset4(bp.dv_stride, b, kvh, j, d), dv_acc[c]);
  }
}

}  // namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
