// Packed K/V panels for the SIMD GEMM (simd.hpp) of one (batch, kv head) and key range: Kᵀ in strips of W keys
// (for S = Q·Kᵀ) and V in strips of W value columns (for O += P·V), in the compute type. Packed once per task and
// reused by every query block of it. Non-finite V rows are zeroed in the panel and remembered (BadValues).
#pragma once

#include <stdexcept>
#include <type_traits>

#include "cpu_common.hpp"
#include "simd.hpp"

namespace attncheck::cpu {

// Up to this many query rows per GEMM, K is packed in the row layout (gemm_nt): `cpu`'s blocks and cpu-flash's
// decode and short query blocks both choose with it.
constexpr int64_t kFewRows = 4;

// Whether Q·Kᵀ runs on the avx3_bf16 kernel (simd::gemm_bf16_pairs) where the panels and Q rows allow it: bf16 Q
// and K, that target selected, no raw scores requested and |scale| <= 2^40. The instruction flushes subnormal
// partial sums, moving a dot product by < Dqk·2^-126: raw scores are judged down to FLT_MIN, and a huge scale would
// carry it into the softmax (2^40: < Dqk·2^-86). Subnormal inputs are checked where they are packed (DAZ).
inline bool bf16_pairs_apply(const Problem& p, const Inputs& in) {
  // Not with RoPE: the rotated rows are no longer bf16 values.
  return in.q.dtype == DType::bf16 && in.k.dtype == DType::bf16 && p.scores_out == ScoresOut::none &&
         !uses_position_stage(p) && std::abs(p.effective_scale()) <= 0x1p40 && simd::bf16_dot();
}
// nr rows of Q (widened bf16, Dqk each) as bf16 pairs into q2 ((Dqk + 1) / 2 words a row); false if one of them is
// subnormal.
inline bool q_as_pairs(const float* Q, int64_t nr, int64_t Dqk, std::vector<uint32_t>& q2) {
  const int64_t kp = (Dqk + 1) / 2;
  q2.resize(static_cast<size_t>(nr * kp));
  bool ok = true;
  for (int64_t r = 0; r < nr; ++r) ok = simd::pack_bf16_pairs(Q + r * Dqk, Dqk, q2.data() + r * kp, 1) && ok;
  return ok;
}

template <class T>
struct Panels {
  int64_t W = 0, k0 = 0, k1 = 0, Dqk = 0, Dv = 0, rows_pad = 0;
  bool rows = false;       // row layout (K rows as they are, V rows padded to dv_pad()) for gemm_nt / decode
  std::vector<T> kt;       // strip s (keys k0 + s·W ..) at s·Dqk·W, row p (head dim p) at + p·W; rows: key-major
  std::vector<T> v;        // strip s (value dims s·W ..) at s·vstride(), row j (key k0 + j) at + j·W; rows: dv_pad()
  std::vector<T> scratch;  // rows as loaded
  // Kᵀ again as bf16 pairs for simd::gemm_bf16_pairs (target avx3_bf16, bf16 K without subnormals): strip s at
  // s·kp·W, pair row p (head dims 2p, 2p + 1) at + p·W. Empty, pairs false, otherwise.
  std::vector<uint32_t> kt2;
  bool pairs = false;
  int64_t kp = 0;
  BadValues<T> bad;  // cols are absolute key indices

  int64_t vstride() const { return rows_pad * W; }
  int64_t dv_pad() const { return (Dv + W - 1) / W * W; }
  // Row layout: K and V rows, copied (kld = Dqk, vld = dv_pad()) or, when the input already has them in the
  // compute type with finite values, read in place (the tensor's row strides; V only if Dv is whole strips).
  // bf16 / fp16 rows (T = float) are read in place too, as 16-bit values widened by the GEMM's loads (k16 / v16
  // set, krows / vrows null): decode reads every K/V element once, and a widened copy was most of its traffic.
  const T *krows = nullptr, *vrows = nullptr;
  const uint16_t *k16 = nullptr, *v16 = nullptr;
  simd::Half16 half = simd::Half16::bf16;
  int64_t kld = 0, vld = 0;
  // A quantized cache's codes read in place (T = float; k8 / v8 set, krows / vrows null), dequantised in registers
  // by the GEMM's loads (simd::Codes8): the scales of the block's rows as floats (ks / vs), exact.
  CodesView kq, vq;
  const uint8_t *k8 = nullptr, *v8 = nullptr;

  // Packed Kᵀ starting at key j (j - k0 a multiple of W); K row j (row layout, kld apart).
  const T* kt_at(int64_t j) const { return kt.data() + (j - k0) / W * Dqk * W; }
  const uint32_t* kt2_at(int64_t j) const { return kt2.data() + (j - k0) / W * kp * W; }
  // Strip layout, pairs: C[i][c] = Q row i · K row (j + c) for m rows of Q as bf16 pairs (q_as_pairs) and n keys
  // from j (j - k0 a multiple of W; whole strips written). T = float only (pairs is never set otherwise).
  void dots_pairs(int64_t m, int64_t n, const uint32_t* q2, int64_t j, T* C, int64_t ldc) const {
    if constexpr (std::is_same_v<T, float>)
      simd::gemm_bf16_pairs(m, n, kp, q2, kp, kt2_at(j), kp * W, W, C, ldc);
    else
      throw std::logic_error("Panels::dots_pairs: bf16 pairs are float-only");
  }
  const T* krow_at(int64_t j) const { return krows + (j - k0) * kld; }
  // V from key j as a gemm() B operand: pointer, strip stride, row stride.
  const T* v_at(int64_t j) const { return rows ? vrows + (j - k0) * vld : v.data() + (j - k0) * W; }
  int64_t v_bstride() const { return rows ? W : vstride(); }
  int64_t v_ldb() const { return rows ? vld : W; }

  // Rows [a, b) of head h of batch bb of t in place, if t holds T with a unit inner stride (else nullptr).
  static const T* in_place(const Tensor& t, int64_t bb, int64_t h, int64_t a) {
    const DType want = std::is_same_v<T, double> ? DType::f64 : DType::f32;
    if (t.dtype != want || t.strides[3] != 1) return nullptr;
    return t.data<T>() + bb * t.strides[0] + h * t.strides[1] + a * t.strides[2];
  }
  // Whether rows [a, b) of V are all finite (read only).
  static bool finite_rows(const T* v, int64_t ld, int64_t n, int64_t Dv) {
    for (int64_t r = 0; r < n; ++r)  // x * 0 is 0 for finite x, NaN otherwise; the sum sees any NaN
      if ((Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(v + r * ld, Dv) * T(0)).sum() != T(0)) return false;
    return true;
  }
  // Rows [a, ..) of head h of batch bb of t in place as 16-bit floats (T = float only), with their kind; nullptr
  // if t holds something else or its inner stride is not 1.
  static const uint16_t* in_place16(const Tensor& t, int64_t bb, int64_t h, int64_t a, simd::Half16& kind) {
    if (!std::is_same_v<T, float> || (t.dtype != DType::bf16 && t.dtype != DType::f16) || t.strides[3] != 1)
      return nullptr;
    kind = t.dtype == DType::bf16 ? simd::Half16::bf16 : simd::Half16::f16;
    return t.data<uint16_t>() + bb * t.strides[0] + h * t.strides[1] + a * t.strides[2];
  }
  // Whether n rows of Dv 16-bit floats are all finite: the largest magnitude's bits (sign cleared, so a signed
  // 16-bit max, which vectorises even for SSE2) are below the exponent field all ones (bf16: 8 bits, fp16: 5).
  static bool finite_rows16(const uint16_t* v, int64_t ld, int64_t n, int64_t Dv, simd::Half16 kind) {
    const int16_t inf = kind == simd::Half16::bf16 ? 0x7f80 : 0x7c00;
    int16_t mx = 0;
    for (int64_t r = 0; r < n; ++r) {
      const uint16_t* row = v + r * ld;
      for (int64_t d = 0; d < Dv; ++d) mx = std::max(mx, static_cast<int16_t>(row[d] & 0x7fff));
    }
    return mx < inf;
  }

  // Row layout: C[i][c] = Q row i · K row (j + c) for m rows of Q (row stride lda) and n keys from j.
  void dots_rows(int64_t m, int64_t n, const T* Q, int64_t lda, int64_t j, T* C, int64_t ldc) const {
    if constexpr (std::is_same_v<T, float>) {
      if (k16) return simd::gemm_nt_half(half, m, n, Dqk, Q, lda, k16 + (j - k0) * kld, kld, C, ldc);
      if (k8)
        return simd::gemm_nt_codes(kq.c, m, n, Dqk, Q, lda, k8 + (j - k0) * kld, kld, kq.row_scales(j - k0), C, ldc);
    }
    simd::gemm_nt<T>(m, n, Dqk, Q, lda, krow_at(j), kld, C, ldc);
  }
  // C (+)= P · V over the n keys from j (either layout): m rows of P (row stride ldp), all Dv columns.
  void pv(int64_t m, int64_t n, const T* P, int64_t ldp, int64_t j, T* C, int64_t ldc, bool accumulate) const {
    if constexpr (std::is_same_v<T, float>) {
      if (v16) return simd::gemm_half(half, m, Dv, n, P, ldp, v16 + (j - k0) * vld, W, vld, C, ldc, accumulate);
      if (v8)
        return simd::gemm_codes(vq.c, m, Dv, n, P, ldp, v8 + (j - k0) * vld, vld, vq.row_scales(j - k0), C, ldc,
                                accumulate);
    }
    simd::gemm<T>(m, Dv, n, P, ldp, v_at(j), v_bstride(), v_ldb(), C, ldc, accumulate);
  }

  // Keys [a, b) of head kvh of batch b_ (a may be any key; panels start there), in the strip or the row layout;
  // `bf16_pairs` (the caller's bf16_pairs_apply): the strip layout also as kt2 unless K holds a subnormal.
  void pack(const Problem& p, const Inputs& in, int64_t b_, int64_t kvh, int64_t a, int64_t b, bool row_layout = false,
            bool bf16_pairs = false) {
    W = simd::strip_width<T>(), k0 = a, k1 = std::max(a, b), Dqk = p.Dqk, Dv = p.Dv, rows = row_layout;
    const int64_t n = k1 - k0, strips = (n + W - 1) / W;
    rows_pad = strips * W;
    bad.clear();
    k16 = v16 = nullptr;
    k8 = v8 = nullptr;
    kp = (Dqk + 1) / 2;
    pairs = std::is_same_v<T, float> && bf16_pairs && !rows && W == 32;  // 32: the kernel's strip
    if (pairs) kt2.assign(static_cast<size_t>(strips * kp * W), 0u);
    if (rows) {
      // RoPE: K rows are rotated as they are loaded (never read in place unrotated).
      const RopeStage rope(p);
      krows = rope.on() ? nullptr : in_place(in.k, b_, kvh, k0), kld = in.k.strides[2];
      if (!krows && !rope.on()) k16 = in_place16(in.k, b_, kvh, k0, half);
      if (!krows && !k16 && !rope.on() && kq.view(p, in, 1, b_, kvh, k0, n)) k8 = kq.codes, kld = kq.ld;
      if (!krows && !k16 && !k8) {
        kt.resize(static_cast<size_t>(n * Dqk));
        load_kv_rows(p, in, 1, b_, kvh, k0, k1, kt.data());
        rotate_rows(rope, false, b_, k0, k1, Dqk, kt.data());
        krows = kt.data(), kld = Dqk;
      }
      const Tensor& vt = kv_tensor(p, in, 2);
      vrows = Dv % W == 0 ? in_place(vt, b_, kvh, k0) : nullptr, vld = vt.strides[2];
      if (vrows && finite_rows(vrows, vld, n, Dv)) return;
      if (Dv % W == 0 && vq.view(p, in, 2, b_, kvh, k0, n) && vq.finite(p, n)) {
        v8 = vq.codes, vld = vq.ld, vrows = nullptr;
        return;
      }
      simd::Half16 vkind = half;
      if (const uint16_t* v = Dv % W == 0 ? in_place16(vt, b_, kvh, k0, vkind) : nullptr;
          v && (!k16 || vkind == half) && finite_rows16(v, vld, n, Dv, vkind)) {
        v16 = v, half = vkind, vrows = nullptr;
        return;
      }
      v.resize(static_cast<size_t>(n * dv_pad()));
      vrows = v.data(), vld = dv_pad();
      scratch.resize(static_cast<size_t>(n * Dv));
      load_kv_rows(p, in, 2, b_, kvh, k0, k1, scratch.data());
      bad.scan(scratch.data(), n, Dv, k0);
      for (int64_t r = 0; r < n; ++r) {
        T* dst = v.data() + r * dv_pad();
        std::copy(scratch.data() + r * Dv, scratch.data() + (r + 1) * Dv, dst);
        std::fill(dst + Dv, dst + dv_pad(), T(0));
      }
      return;
    }
    kt.assign(static_cast<size_t>(strips * Dqk * W), T(0));
    v.assign(static_cast<size_t>((dv_pad() / W) * vstride()), T(0));
    constexpr int64_t kChunk = 64;  // keys loaded at a time (a multiple of every W)
    scratch.resize(static_cast<size_t>(kChunk * std::max(Dqk, Dv)));
    const RopeStage rope(p);
    for (int64_t j = k0; j < k1; j += kChunk) {
      const int64_t je = std::min(k1, j + kChunk), nr = je - j;
      load_kv_rows(p, in, 1, b_, kvh, j, je, scratch.data());
      rotate_rows(rope, false, b_, j, je, Dqk, scratch.data());  // RoPE on each chunk of keys as it is read
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t key = j - k0 + r;
        T* dst = kt.data() + key / W * Dqk * W + key % W;
        const T* src = scratch.data() + r * Dqk;
        for (int64_t d = 0; d < Dqk; ++d) dst[d * W] = src[d];
        if constexpr (std::is_same_v<T, float>)
          if (pairs) pairs = simd::pack_bf16_pairs(src, Dqk, kt2.data() + key / W * kp * W + key % W, W);
      }
      load_kv_rows(p, in, 2, b_, kvh, j, je, scratch.data());
      bad.scan(scratch.data(), nr, Dv, j);
      for (int64_t r = 0; r < nr; ++r) {  // row r of V: W contiguous values into each strip
        const T* src = scratch.data() + r * Dv;
        T* dst = v.data() + (j - k0 + r) * W;
        for (int64_t d0 = 0, s = 0; d0 < Dv; d0 += W, ++s)
          std::copy(src + d0, src + std::min(Dv, d0 + W), dst + s * vstride());
      }
    }
  }

  // acc[r, :] += P[r, key - j0] · V[key] for the remembered non-finite rows with key in [v0, v1) and a nonzero
  // weight (what the reference does; the GEMM saw zeros there).
  void add_bad(const T* P, int64_t ldp, int64_t nr, int64_t j0, int64_t v0, int64_t v1, T* acc, int64_t ldacc) const {
    for (size_t c = 0; c < bad.cols.size(); ++c) {
      const int64_t key = bad.cols[c];
      if (key < v0 || key >= v1) continue;
      const T* row = bad.rows.data() + c * static_cast<size_t>(Dv);
      for (int64_t r = 0; r < nr; ++r) {
        const T w = P[r * ldp + key - j0];
        if (w == T(0)) continue;
        for (int64_t d = 0; d < Dv; ++d) acc[r * ldacc + d] += w * row[d];
      }
    }
  }
};

}  // namespace attncheck::cpu
