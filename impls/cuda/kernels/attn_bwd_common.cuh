// What the backward kernels share (docs/backward.md, derivation): their parameters, the gradient of one
// (query, key) pair recomputed from the forward's lse -- P = exp(s - lse), dP' = dO·v, dS = P (kf·dP' - D), the
// logit stage's chain rule -- and the two small kernels around the main passes: the row statistics (D = rowsum(dO∘O)
// and whether the row has a visible key) and the dBias reduction over broadcast dimensions.
#pragma once

#include "attn_common.cuh"

namespace attncheck::cuda {

struct BwdParams {
  // The forward's problem: q, k, v, masks, bias, dropout; `a.out` is the forward's output O, `a.lse` its lse
  // (accumulation type, [B, Hq, Lq] contiguous). weights and scratch are unused.
  AttnParams a;
  const void* dout;  // dO [B, Hq, Lq, Dv], element type
  int64_t do_stride[4];
  void* dq;  // [B, Hq, Lq, Dqk], element type
  void* dk;  // [B, Hkv, Lk, Dqk]
  void* dv;  // [B, Hkv, Lk, Dv]
  int64_t dq_stride[4], dk_stride[4], dv_stride[4];
  void* d;              // [B, Hq, Lq] accumulation type: D_i = dO_i·O_i (0 on rows without a visible key)
  unsigned char* live;  // [B, Hq, Lq]: 1 when the row has a visible key with a score > -inf (else no gradient)
  void* ds;             // [B, Hq, Lq, Lk] accumulation type, dS of every pair (zero-initialised), or nullptr
  void* dbias;          // the bias shape, row-major, accumulation type, or nullptr (no bias)
  int64_t bias_shape[4];
};

inline namespace ATTNCHECK_KERNEL_NS {

// The gradient terms of pair (i, j): P'_ij (what dV_j receives per dO_i), dS_ij (what the bias receives) and
// dR_ij = dS_ij · logit'(x_ij) (what scale·q_i·k_j receives). All zero for a pair with no gradient.
template <class Acc>
struct PairGrad {
  Acc pk, ds, dr;
};

// q, k, dO, v: the rows of query i and key j in the accumulation type (shared memory). lse and D of row i.
// A masked key is never read: with -inf fill it has no weight; with a finite fill it has the weight
// exp(fill - lse) (dV only: its score is a constant). dO·v is formed only where the weight is kept and non-zero,
// so a poisoned V of an unseen key stays unread.
template <class Acc>
__device__ inline PairGrad<Acc> pair_grad(const AttnParams& p, int b, int h, int64_t i, int64_t j, int64_t diag,
                                          int64_t valid, const Acc* q, const Acc* k, const Acc* dO, const Acc* v,
                                          int Dqk, int Dv, Acc lse, Acc D) {
  PairGrad<Acc> g{Acc(0), Acc(0), Acc(0)};
  const bool vis = key_visible(p, b, h, i, j, diag, valid);
  Acc s, chain = Acc(1);
  if (vis) {
    Acc dot = 0;
    for (int d = 0; d < Dqk; ++d) dot = ac_fma(q[d], k[d], dot);  // the forward's order: the same score bits
    s = logit_stage(p, dot * static_cast<Acc>(p.scale), &chain);  // transform_score, keeping the chain factor
    if (p.bias) s += static_cast<const Acc*>(p.bias)[offset4(p.bias_stride, b, h, i, j)];
    s = mods_score(p, s, b, h, diag, j);  // additive (ALiBi, T5): d s / d s_in = 1, the chain is unchanged
  } else if (p.fill_finite) {
    s = static_cast<Acc>(p.fill_value);
  } else {
    return g;
  }
  const Acc P = ac_exp(s - lse);
  const Acc kf = keep_factor<Acc>(p, b, h, i, j);
  g.pk = kf == Acc(0) ? Acc(0) : P * kf;
  if (!vis || P == Acc(0)) return g;
  Acc dp = 0;
  if (kf != Acc(0)) {
    for (int d = 0; d < Dv; ++d) dp = ac_fma(dO[d], v[d], dp);
    dp *= kf;
  }
  g.ds = P * (dp - D);
  g.dr = g.ds * chain;
  return g;
}

constexpr int kBwdRowsPerBlock = 4;  // warps per block of the row-statistics kernel

// Row statistics, one warp per row (b, h, i): D_i = Σ_d dO_id·O_id over the forward's O, and liveness: a visible
// key with a score > -inf (the forward's test for a fully masked row, which gets no gradient under every policy).
template <class T>
__global__ void attn_bwd_rowstats_kernel(BwdParams bp) {
  using Acc = typename AccOf<T>::type;
  const AttnParams& p = bp.a;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t rows = static_cast<int64_t>(p.B) * p.Hq * p.Lq;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kBwdRowsPerBlock + warp;
  if (row >= rows) return;  // the whole warp leaves together; no block-wide barrier in this kernel
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.Hq) * p.Lq));
  const int h = static_cast<int>((row / p.Lq) % p.Hq);
  const int64_t i = row % p.Lq;
  const int kvh = h / (p.Hq / p.Hkv);
  const int64_t diag = i + gload(p.diag_offset, b), valid = gload(p.key_length, b);

  int live = 0;
  for (int64_t j0 = 0; j0 < p.Lk && !live; j0 += 32) {  // `live` is warp-uniform: every lane leaves together
    const int64_t j = j0 + lane;
    int found = 0;
    if (j < p.Lk && key_visible(p, b, h, i, j, diag, valid)) {
      Acc dot = 0;
      for (int d = 0; d < p.Dqk; ++d)
        dot = ac_fma(load_as<T>(p.q, offset4(p.q_stride, b, h, i, d)),
                     load_as<T>(p.k, offset4(p.k_stride, b, kvh, j, d)), dot);
      found = transform_score(p, dot, b, h, i, j, diag) > neg_inf<Acc>();
    }
    live = __any_sync(0xffffffffu, found);
  }
  Acc D = 0;
  if (live) {
    for (int d = lane; d < p.Dv; d += 32)
      D = ac_fma(load_as<T>(bp.dout, offset4(bp.do_stride, b, h, i, d)),
                 load_as<T>(p.out, offset4(p.o_stride, b, h, i, d)), D);
    D = warp_sum(D);
  }
  if (lane == 0) {
    gstore(static_cast<Acc*>(bp.d), row, D);
    gstore(bp.live, row, static_cast<unsigned char>(live));
  }
}

constexpr int kBwdBiasThreads = 128;

// dBias, one thread per element (b', h', i', j') of the bias shape: the sum of dS over every (b, h, i, j) that
// reads it (all of a dimension where the bias has extent 1), in a fixed order.
template <class T>
__global__ void attn_bwd_dbias_kernel(BwdParams bp) {
  using Acc = typename AccOf<T>::type;
  const AttnParams& p = bp.a;
  const int64_t* s = bp.bias_shape;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kBwdBiasThreads + threadIdx.x;
  if (n >= s[0] * s[1] * s[2] * s[3]) return;
  const int64_t jj = n % s[3], ii = (n / s[3]) % s[2], hh = (n / (s[3] * s[2])) % s[1], bb = n / (s[3] * s[2] * s[1]);
  const int64_t b_lo = s[0] == 1 ? 0 : bb, b_hi = s[0] == 1 ? p.B : bb + 1;
  const int64_t h_lo = s[1] == 1 ? 0 : hh, h_hi = s[1] == 1 ? p.Hq : hh + 1;
  const int64_t i_lo = s[2] == 1 ? 0 : ii, i_hi = s[2] == 1 ? p.Lq : ii + 1;
  const int64_t j_lo = s[3] == 1 ? 0 : jj, j_hi = s[3] == 1 ? p.Lk : jj + 1;
  const Acc* ds = static_cast<const Acc*>(bp.ds);
  Acc sum = 0;
  for (int64_t b = b_lo; b < b_hi; ++b)
    for (int64_t h = h_lo; h < h_hi; ++h)
      for (int64_t i = i_lo; i < i_hi; ++i)
        for (int64_t j = j_lo; j < j_hi; ++j) sum += gload(ds, ((b * p.Hq + h) * p.Lq + i) * p.Lk + j);
  gstore(static_cast<Acc*>(bp.dbias), n, sum);
}

}  // namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
