// Kernel 2, fused flash-style: a block owns BR query rows of one (batch, head), one warp per row. The Q tile
// sits in shared memory; K/V tiles of BC keys are staged through shared memory; each warp keeps an online softmax
// (running max m, denominator l, fp32 accumulators; fp64 for fp64) with warp-shuffle reductions, and writes out, lse
// and the max-logit.
#pragma once

#include "attn_common.cuh"

namespace attncheck::cuda {
inline namespace ATTNCHECK_KERNEL_NS {

// Shared memory of one block, in the accumulation type: Q tile [BR][Dqk], K tile [BC][Dqk], V tile [BC][Dv], and
// per warp the effective weights of visible keys P [BR][BC] and the dropout factors of masked keys (finite fill)
// M [BR][BC]; then one int per warp: whether its row sees a key of the tile.
template <class Acc, int BR, int BC>
inline size_t flash_smem_bytes(int Dqk, int Dv) {
  return sizeof(Acc) * (static_cast<size_t>(BR) * Dqk + static_cast<size_t>(BC) * (Dqk + Dv) + 2u * BR * BC) +
         sizeof(int) * BR;
}

// BR rows (warps) per block, BC keys per tile (BC <= 32: lane j scores key j of the tile), NV = Dv/32 rounded
// up: the accumulator registers per lane (lane owns output dims lane, lane + 32, ...).
template <class T, int BR, int BC, int NV>
__global__ void attn_flash_kernel(AttnParams p) {
  static_assert(BC >= 1 && BC <= 32, "one key per lane");
  using Acc = typename AccOf<T>::type;
  ATTNCHECK_DYNAMIC_SHARED(unsigned char, smem);
  Acc* sQ = reinterpret_cast<Acc*>(smem);             // [BR][Dqk]
  Acc* sK = sQ + BR * p.Dqk;                          // [BC][Dqk]
  Acc* sV = sK + BC * p.Dqk;                          // [BC][Dv]
  Acc* sP = sV + BC * p.Dv;                           // [BR][BC]
  Acc* sM = sP + BR * BC;                             // [BR][BC]
  int* sSees = reinterpret_cast<int*>(sM + BR * BC);  // [BR]

  const int tid = static_cast<int>(threadIdx.x), nthreads = BR * 32;
  const int warp = tid / 32, lane = tid % 32;
  const int bh = static_cast<int>(blockIdx.y);
  const int b = bh / p.Hq, h = bh % p.Hq, kvh = h / (p.Hq / p.Hkv);
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * BR;
  const int64_t i = i0 + warp;
  const bool row_valid = i < p.Lq;  // rows past Lq still take part in every __syncthreads
  const int64_t off = gload(p.diag_offset, b), valid = gload(p.key_length, b);
  const int64_t diag = i + off;
  const Acc fill = static_cast<Acc>(p.fill_value);

  // Q tile, widened to fp32 once.
  for (int x = tid; x < BR * p.Dqk; x += nthreads) {
    const int r = x / p.Dqk, d = x % p.Dqk;
    sQ[x] = i0 + r < p.Lq ? load_as<T>(p.q, offset4(p.q_stride, b, h, i0 + r, d)) : Acc(0);
  }
  // The position stage: each warp stages its own row of the Q tile, and every warp rows of each K tile.
  const bool staged = uses_position_stage(p);
  if (staged) {
    __syncthreads();
    if (row_valid) stage_row(p, p.q_norm_weight, sQ + warp * p.Dqk, lane, p.rope_q_pos, rope_query_pos(p, b, i));
  }

  // Keys that can be visible to any row of the block. With a finite fill every key takes part, so none is skipped.
  int64_t j_lo = 0, j_hi = p.Lk;
  if (!p.fill_finite) {
    const int64_t i_last = (i0 + BR < p.Lq ? i0 + BR : p.Lq) - 1;
    if (valid < j_hi) j_hi = valid;
    if (p.causal && i_last + off + 1 < j_hi) j_hi = i_last + off + 1;
    if (p.window_right >= 0 && i_last + off + p.window_right + 1 < j_hi) j_hi = i_last + off + p.window_right + 1;
    if (p.window_left >= 0 && i0 + off - p.window_left > j_lo) j_lo = i0 + off - p.window_left;
    if (j_hi < j_lo) j_hi = j_lo;
  }

  // Online softmax state, identical in every lane of the warp. With a finite fill the running max starts at the
  // fill (the reference's m = max(m, fill)) and masked keys are summed apart: their weight exp(fill - m) is only
  // known at the end, and must be exactly 0 (not 0 x NaN) when it underflows.
  Acc m_run = p.fill_finite ? fill : neg_inf<Acc>();
  Acc m_vis = neg_inf<Acc>();  // the max over visible scores only: the max-logit output
  Acc l = 0;
  Acc acc[NV], acc_masked[NV];
  for (int c = 0; c < NV; ++c) acc[c] = acc_masked[c] = 0;
  int seen = 0;      // this lane saw a visible score > -inf (else the row is fully masked)
  int n_masked = 0;  // this lane's masked keys (finite fill only)

  // A tile no row of the block sees (a boolean mask or mask modification hides all its keys) weighs exactly 0
  // under a -inf fill: it is skipped, which leaves the online state bit for bit as processing it would.
  const bool test_tiles = !p.fill_finite && masks_inside_span(p);
  for (int64_t j0 = j_lo; j0 < j_hi; j0 += BC) {
    __syncthreads();  // the previous tile is consumed (and the Q tile is written)
    if (test_tiles) {
      int sees = 0;
      if (row_valid) {  // warp-uniform
        const int64_t j = j0 + lane;
        sees = __any_sync(0xffffffffu, lane < BC && j < j_hi && key_visible(p, b, h, i, j, diag, valid));
      }
      if (lane == 0) sSees[warp] = sees;
      __syncthreads();
      int block_sees = 0;
      for (int w = 0; w < BR; ++w) block_sees |= sSees[w];
      if (!block_sees) continue;  // the same decision in every thread: the barriers stay matched
    }
    for (int x = tid; x < BC * p.Dqk; x += nthreads) {
      const int r = x / p.Dqk, d = x % p.Dqk;
      sK[x] = j0 + r < p.Lk ? load_k<T>(p, b, kvh, j0 + r, d) : Acc(0);
    }
    for (int x = tid; x < BC * p.Dv; x += nthreads) {
      const int r = x / p.Dv, d = x % p.Dv;
      sV[x] = j0 + r < p.Lk ? load_v<T>(p, b, kvh, j0 + r, d) : Acc(0);
    }
    __syncthreads();
    if (staged) {
      for (int r = warp; r < BC && j0 + r < p.Lk; r += BR)
        stage_row(p, p.k_norm_weight, sK + r * p.Dqk, lane, p.rope_k_pos, rope_key_pos(p, b, j0 + r));
      __syncthreads();
    }
    if (row_valid) {
      const int64_t j = j0 + lane;
      // Tail keys (j >= Lk) score -inf and take no part: never 0, which would be a real score.
      Acc s = neg_inf<Acc>();
      bool vis = false, masked = false;
      if (lane < BC && j < p.Lk) {
        vis = key_visible(p, b, h, i, j, diag, valid);
        masked = !vis;
        if (vis) {
          Acc dot = 0;
          const Acc* qrow = sQ + warp * p.Dqk;
          const Acc* krow = sK + lane * p.Dqk;
          for (int d = 0; d < p.Dqk; ++d) dot = ac_fma(qrow[d], krow[d], dot);
          s = transform_score(p, dot, b, h, i, j, diag);
          if (s > neg_inf<Acc>()) seen = 1;
        }
      }
      const Acc tile_max = warp_max(s);
      const Acc m_new = max_keep(m_run, tile_max);
      m_vis = max_keep(m_vis, tile_max);
      const Acc m_use = m_new == neg_inf<Acc>() ? Acc(0) : m_new;  // all -inf so far: no exp(-inf - -inf)
      const Acc alpha = ac_exp(m_run - m_use);
      const Acc e = vis ? ac_exp(s - m_use) : Acc(0);
      l = l * alpha + warp_sum(e);
      const Acc kf = lane < BC && j < p.Lk ? keep_factor<Acc>(p, b, h, i, j) : Acc(0);
      if (lane < BC) {
        sP[warp * BC + lane] = kf == Acc(0) ? Acc(0) : e * kf;
        sM[warp * BC + lane] = masked && p.fill_finite ? kf : Acc(0);
      }
      if (masked && p.fill_finite) ++n_masked;
      __syncwarp();
      for (int c = 0; c < NV; ++c) {
        const int d = lane + 32 * c;
        if (d >= p.Dv) break;
        Acc a = acc[c] * alpha, am = acc_masked[c];
        for (int jj = 0; jj < BC; ++jj) {
          const Acc w = sP[warp * BC + jj];
          if (w != Acc(0)) a = ac_fma(w, sV[jj * p.Dv + d], a);  // zero weight: V may be NaN-poisoned
          const Acc mk = sM[warp * BC + jj];
          if (mk != Acc(0)) am = ac_fma(mk, sV[jj * p.Dv + d], am);
        }
        acc[c] = a;
        acc_masked[c] = am;
      }
      m_run = m_new;
      __syncwarp();  // sP/sM are rewritten by the next tile
    }
  }

  if (!row_valid) return;  // no block-wide barrier follows
  seen = warp_sum(seen);
  n_masked = warp_sum(n_masked);
  Acc lse;
  const Acc sink = sink_logit<Acc>(p, h);
  if (seen > 0 || sink > neg_inf<Acc>()) {
    // A sink joins the running state as one more term without a value (without one: alpha = 1, nothing changes).
    const Acc m_fin = max_keep(m_run, sink);
    const Acc alpha = ac_exp(m_run - m_fin);
    l = l * alpha + (sink > neg_inf<Acc>() ? ac_exp(sink - m_fin) : Acc(0));
    // Masked keys with a finite fill: n_masked·exp(fill - m) joins the denominator, exp(fill - m)·Σ kf·v the sum.
    // Whether that weight is zero is decided in double, as the reference computes it.
    const double fm = p.fill_finite ? exp(static_cast<double>(fill) - static_cast<double>(m_fin)) : 0.0;
    const Acc f = static_cast<Acc>(fm);
    const Acc l_total = l + static_cast<Acc>(n_masked) * f;
    for (int c = 0; c < NV; ++c) {
      const int d = lane + 32 * c;
      if (d >= p.Dv) break;
      Acc a = acc[c] * alpha;
      if (fm != 0.0) a = ac_fma(f, acc_masked[c], a);
      store_as<T>(p.out, offset4(p.o_stride, b, h, i, d), a / l_total);
    }
    lse = m_fin + ac_log(l_total);
  } else {
    // No visible key: the policy's weight for every key, dropout applied, over all of V (as the reference does).
    const Acc w = fully_masked_weight<Acc>(p);
    for (int c = 0; c < NV; ++c) {
      const int d = lane + 32 * c;
      if (d >= p.Dv) break;
      Acc a = 0;
      for (int64_t j = 0; j < p.Lk && w != Acc(0); ++j) {
        const Acc kf = keep_factor<Acc>(p, b, h, i, j);
        const Acc we = kf == Acc(0) ? Acc(0) : w * kf;
        if (we != Acc(0)) a = ac_fma(we, load_v<T>(p, b, kvh, j, d), a);
      }
      store_as<T>(p.out, offset4(p.o_stride, b, h, i, d), a);
    }
    lse = fully_masked_lse<Acc>(p);
  }
  const int64_t row = (static_cast<int64_t>(b) * p.Hq + h) * p.Lq + i;
  if (p.lse && lane == 0) gstore(static_cast<Acc*>(p.lse), row, lse);
  // max-logit: a row without a visible score gives the fill (-inf or the finite fill_value), as lse does.
  if (p.max_logit && lane == 0)
    gstore(static_cast<Acc*>(p.max_logit), row,
           m_vis > neg_inf<Acc>() ? m_vis : (p.fill_finite ? fill : neg_inf<Acc>()));
}

}  // namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
