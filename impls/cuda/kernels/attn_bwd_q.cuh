// Backward pass 2, dQ (a separate pass instead of FlashAttention-2's atomics: deterministic, and the emulation has
// no atomics): a block owns BR query rows of one (batch, head), one warp per row, like the fused forward. K/V tiles
// of BC keys are staged through shared memory; lane j recomputes the pair (the warp's row, key j) from the saved lse
// and D, and each lane accumulates its dims: dQ_i += Σ_j dR_ij k_j. With a bias, dS of every pair goes to a workspace
// that the dBias kernel reduces.
#pragma once

#include "attn_bwd_common.cuh"

namespace attncheck::cuda {
inline namespace ATTNCHECK_KERNEL_NS {

// Shared memory, accumulation type: Q tile [BR][Dqk], dO tile [BR][Dv], K tile [BC][Dqk], V tile [BC][Dv], and per
// warp dR [BR][BC].
template <class Acc, int BR, int BC>
inline size_t bwd_q_smem_bytes(int Dqk, int Dv) {
  return sizeof(Acc) * (static_cast<size_t>(BR + BC) * (Dqk + Dv) + static_cast<size_t>(BR) * BC);
}

template <class T, int BR, int BC, int NV>
__global__ void attn_bwd_q_kernel(BwdParams bp) {
  static_assert(BC >= 1 && BC <= 32, "one key per lane");
  using Acc = typename AccOf<T>::type;
  const AttnParams& p = bp.a;
  ATTNCHECK_DYNAMIC_SHARED(unsigned char, smem);
  Acc* sQ = reinterpret_cast<Acc*>(smem);  // [BR][Dqk]
  Acc* sdO = sQ + BR * p.Dqk;              // [BR][Dv]
  Acc* sK = sdO + BR * p.Dv;               // [BC][Dqk]
  Acc* sV = sK + BC * p.Dqk;               // [BC][Dv]
  Acc* sR = sV + BC * p.Dv;                // [BR][BC]

  const int tid = static_cast<int>(threadIdx.x), nthreads = BR * 32;
  const int warp = tid / 32, lane = tid % 32;
  const int bh = static_cast<int>(blockIdx.y);
  const int b = bh / p.Hq, h = bh % p.Hq, kvh = h / (p.Hq / p.Hkv);
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * BR;
  const int64_t i = i0 + warp;
  const bool row_valid = i < p.Lq;  // rows past Lq still take part in every __syncthreads
  const int64_t row = (static_cast<int64_t>(b) * p.Hq + h) * p.Lq + i;
  const bool live = row_valid && gload(bp.live, row);
  const int64_t off = gload(p.diag_offset, b), valid = gload(p.key_length, b);
  const Acc lse = live ? gload(static_cast<const Acc*>(p.lse), row) : Acc(0);
  const Acc D = live ? gload(static_cast<const Acc*>(bp.d), row) : Acc(0);
  Acc* ds = static_cast<Acc*>(bp.ds);

  for (int x = tid; x < BR * p.Dqk; x += nthreads) {
    const int r = x / p.Dqk, d = x % p.Dqk;
    sQ[x] = i0 + r < p.Lq ? load_as<T>(p.q, offset4(p.q_stride, b, h, i0 + r, d)) : Acc(0);
  }
  for (int x = tid; x < BR * p.Dv; x += nthreads) {
    const int r = x / p.Dv, d = x % p.Dv;
    sdO[x] = i0 + r < p.Lq ? load_as<T>(bp.dout, offset4(bp.do_stride, b, h, i0 + r, d)) : Acc(0);
  }

  // Keys that can be visible to any row of the block: masked keys have no score gradient, whatever the fill.
  int64_t j_lo = 0, j_hi = p.Lk;
  {
    const int64_t i_last = (i0 + BR < p.Lq ? i0 + BR : p.Lq) - 1;
    if (valid < j_hi) j_hi = valid;
    if (p.causal && i_last + off + 1 < j_hi) j_hi = i_last + off + 1;
    if (p.window_right >= 0 && i_last + off + p.window_right + 1 < j_hi) j_hi = i_last + off + p.window_right + 1;
    if (p.window_left >= 0 && i0 + off - p.window_left > j_lo) j_lo = i0 + off - p.window_left;
    if (j_hi < j_lo) j_hi = j_lo;
  }

  Acc acc[NV];
  for (int c = 0; c < NV; ++c) acc[c] = 0;
  for (int64_t j0 = j_lo; j0 < j_hi; j0 += BC) {
    __syncthreads();  // the previous tile is consumed (and Q, dO are written)
    for (int x = tid; x < BC * p.Dqk; x += nthreads) {
      const int r = x / p.Dqk, d = x % p.Dqk;
      sK[x] = j0 + r < p.Lk ? load_as<T>(p.k, offset4(p.k_stride, b, kvh, j0 + r, d)) : Acc(0);
    }
    for (int x = tid; x < BC * p.Dv; x += nthreads) {
      const int r = x / p.Dv, d = x % p.Dv;
      sV[x] = j0 + r < p.Lk ? load_as<T>(p.v, offset4(p.v_stride, b, kvh, j0 + r, d)) : Acc(0);
    }
    __syncthreads();
    if (!row_valid) continue;
    if (lane < BC) {
      const int64_t j = j0 + lane;
      PairGrad<Acc> g{Acc(0), Acc(0), Acc(0)};
      if (live && j < p.Lk)
        g = pair_grad<Acc>(p, b, h, i, j, i + off, valid, sQ + warp * p.Dqk, sK + lane * p.Dqk, sdO + warp * p.Dv,
                           sV + lane * p.Dv, p.Dqk, p.Dv, lse, D);
      sR[warp * BC + lane] = g.dr;
      if (ds && j < p.Lk) gstore(ds, row * p.Lk + j, g.ds);
    }
    __syncwarp();
    for (int c = 0; c < NV; ++c) {
      const int d = lane + 32 * c;
      if (d >= p.Dqk) break;
      Acc a = acc[c];
      for (int jj = 0; jj < BC; ++jj) {
        const Acc r = sR[warp * BC + jj];
        if (r != Acc(0)) a = ac_fma(r, sK[jj * p.Dqk + d], a);  // zero term: K may be NaN-poisoned
      }
      acc[c] = a;
    }
    __syncwarp();  // sR is rewritten by the next tile
  }

  if (!row_valid) return;
  const Acc scale = static_cast<Acc>(p.scale);
  for (int c = 0; c < NV; ++c) {
    const int d = lane + 32 * c;
    if (d < p.Dqk) store_as<T>(bp.dq, offset4(bp.dq_stride, b, h, i, d), scale * acc[c]);
  }
}

}  // namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
