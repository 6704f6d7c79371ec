// Kernel 1, the straightforward one: one warp per query row, kNaiveRowsPerBlock rows per block. The row's
// scores are materialised in global memory (the weights output, or a workspace), then its masked softmax,
// then weights·V. Reads like the reference's three loops; the fused kernel 2 is judged against the same oracle.
#pragma once

#include "attn_common.cuh"

namespace attncheck::cuda {
inline namespace ATTNCHECK_KERNEL_NS {

constexpr int kNaiveRowsPerBlock = 4;  // warps per block

template <class T>
__global__ void attn_naive_kernel(AttnParams p) {
  using Acc = typename AccOf<T>::type;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t rows = static_cast<int64_t>(p.B) * p.Hq * p.Lq;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kNaiveRowsPerBlock + warp;
  if (row >= rows) return;  // the whole warp leaves together; this kernel has no block-wide barrier
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.Hq) * p.Lq));
  const int h = static_cast<int>((row / p.Lq) % p.Hq);
  const int64_t i = row % p.Lq;
  const int kvh = h / (p.Hq / p.Hkv);  // GQA: query head h reads KV head h / group
  const int64_t diag = i + gload(p.diag_offset, b);
  const int64_t valid = gload(p.key_length, b);
  const Acc fill = p.fill_finite ? static_cast<Acc>(p.fill_value) : neg_inf<Acc>();
  Acc* const s = static_cast<Acc*>(p.weights ? p.weights : p.scratch) + row * p.Lk;  // (Lk): scores, then weights

  const auto qx = [&](int e) { return load_as<T>(p.q, offset4(p.q_stride, b, h, i, e)); };
  const bool staged = uses_position_stage(p);
  const double q_r = staged ? row_norm_scale(p, p.q_norm_weight, qx) : 1.0;
  const int64_t q_pos = staged ? rope_query_pos(p, b, i) : 0;

  // 1. scores: visible keys get scale·q·k through the logit stage, + bias; masked keys the fill; lanes stride keys.
  Acc m = neg_inf<Acc>();  // max over visible keys (the reference's m before the finite fill joins)
  for (int64_t j = lane; j < p.Lk; j += 32) {
    if (!key_visible(p, b, h, i, j, diag, valid)) {
      gstore(s, j, fill);  // never read K or V of a masked key
      continue;
    }
    Acc dot = 0;
    if (staged) {  // q and k through the position stage, element by element
      const auto kx = [&](int e) { return load_k<T>(p, b, kvh, j, e); };
      const double k_r = row_norm_scale(p, p.k_norm_weight, kx);
      const int64_t k_pos = rope_key_pos(p, b, j);
      for (int d = 0; d < p.Dqk; ++d)
        dot = ac_fma(staged_elem<Acc>(p, p.q_norm_weight, qx, q_r, p.rope_q_pos, q_pos, d),
                     staged_elem<Acc>(p, p.k_norm_weight, kx, k_r, p.rope_k_pos, k_pos, d), dot);
    } else {
      for (int d = 0; d < p.Dqk; ++d) dot = ac_fma(qx(d), load_k<T>(p, b, kvh, j, d), dot);
    }
    const Acc sj = transform_score(p, dot, b, h, i, j, diag);
    gstore(s, j, sj);
    m = max_keep(m, sj);
  }
  m = warp_max(m);
  __syncwarp();  // scores written by other lanes are read below
  // max-logit: the largest visible score; a row without one gives the fill (-inf or the finite fill_value).
  if (p.max_logit && lane == 0) gstore(static_cast<Acc*>(p.max_logit), row, m > neg_inf<Acc>() ? m : fill);

  // 2. softmax of the row. A row is fully masked when no visible score exceeds -inf and it has no sink (the
  // reference's test); a sink is one more term of the sum, without a value.
  const Acc sink = sink_logit<Acc>(p, h);
  Acc lse;
  if (m > neg_inf<Acc>() || sink > neg_inf<Acc>()) {
    if (p.fill_finite) m = max_keep(m, fill);  // masked keys take part with the finite fill
    m = max_keep(m, sink);
    Acc sum = 0;
    for (int64_t j = lane; j < p.Lk; j += 32) {
      const Acc e = ac_exp(gload(s, j) - m);  // a masked key with fill -inf gives exactly 0
      gstore(s, j, e);
      sum += e;
    }
    sum = warp_sum(sum);
    if (sink > neg_inf<Acc>()) sum += ac_exp(sink - m);
    for (int64_t j = lane; j < p.Lk; j += 32) gstore(s, j, gload(s, j) / sum);
    lse = m + ac_log(sum);
  } else {
    const Acc w = fully_masked_weight<Acc>(p);
    for (int64_t j = lane; j < p.Lk; j += 32) gstore(s, j, w);
    lse = fully_masked_lse<Acc>(p);
  }
  if (p.lse && lane == 0) gstore(static_cast<Acc*>(p.lse), row, lse);
  __syncwarp();

  // 3. out = weights·V; dropout keeps (x 1/(1-p)) or drops; a zero weight never touches V (it may be NaN).
  for (int d = lane; d < p.Dv; d += 32) {
    Acc acc = 0;
    for (int64_t j = 0; j < p.Lk; ++j) {
      const Acc kf = keep_factor<Acc>(p, b, h, i, j);
      const Acc w = kf == Acc(0) ? Acc(0) : gload(s, j) * kf;
      if (w == Acc(0)) continue;
      acc = ac_fma(w, load_v<T>(p, b, kvh, j, d), acc);
    }
    store_as<T>(p.out, offset4(p.o_stride, b, h, i, d), acc);
  }
}

}  // namespace ATTNCHECK_KERNEL_NS
}  // namespace attncheck::cuda
