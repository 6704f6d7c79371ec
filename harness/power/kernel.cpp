// The correct fast kernel of `attncheck power` (online softmax over 64-key tiles in fp32, as FlashAttention) and
// its variants: correct ones that sum differently, and faults injected at one place each. Plain loops, one query
// row at a time: for each key a dot product, then the softmax and P·V in the variant's order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <random>

#include "attncheck/block_mask.hpp"
#include "attncheck/fp8_out.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/rope.hpp"
#include "power.hpp"

namespace attncheck::power {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

float tf32(float x) {  // round to nearest even with a 10-bit mantissa (tensor-core operands)
  if (!std::isfinite(x)) return x;
  uint32_t b;
  std::memcpy(&b, &x, 4);
  b = (b + 0xFFFu + ((b >> 13) & 1u)) & ~0x1FFFu;
  std::memcpy(&x, &b, 4);
  return x;
}
float bf16(float x) { return static_cast<float>(round_to(DType::bf16, x)); }
float half(float x) { return static_cast<float>(round_to(DType::f16, x)); }

// Sum of terms in the variant's order (two-pass orders).
float sum_terms(const std::vector<float>& t, Order o) {
  switch (o) {
    case Order::reversed: {
      float s = 0;
      for (size_t j = t.size(); j-- > 0;) s += t[j];
      return s;
    }
    case Order::kahan: {
      float s = 0, c = 0;
      for (float x : t) {
        const float y = x - c, u = s + y;
        c = (u - s) - y;
        s = u;
      }
      return s;
    }
    case Order::pairwise: {
      std::vector<float> a = t;
      while (a.size() > 1) {
        std::vector<float> b((a.size() + 1) / 2);
        for (size_t k = 0; k < a.size() / 2; ++k) b[k] = a[2 * k] + a[2 * k + 1];
        if (a.size() % 2) b.back() = a.back();
        a.swap(b);
      }
      return a.empty() ? 0.0f : a[0];
    }
    default: {
      float s = 0;
      for (float x : t) s += x;
      return s;
    }
  }
}

// RoPE as a fused kernel does it, on rows of Dqk floats: inv_freq = 1 / powf(theta, 2f / r) and the angle
// fl32(position * inv_freq) in fp32 (or fp64, rope-fp64-angles), cos/sin in fp32 (or from an fp16/bf16 table), the
// rotation in fp32, the rotated row rounded to the input dtype (the MMA's operand). The faults live here.
void rope_rows(const Variant& v, const Problem& p, bool query, int64_t rows, std::vector<float>& x) {
  const int64_t r = p.rotary_dim, D = p.Dqk, half_r = r / 2;
  const std::vector<double> inv64 = rope_inv_freq(p);
  const bool gptj = p.rotary_interleaved != (v.fault == Fault::rope_interleave);
  const int64_t first = v.fault == Fault::rope_partial_wrong_half ? D - r : 0;
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t i = query ? n % p.Lq : n;  // query rows are (head, row)
    int64_t pos = query ? rope_position(p, 0, i + p.diagonal_offset(0)) : rope_position(p, 0, i);
    if (query && v.fault == Fault::rope_offset_ignored) pos = i;
    if (query && v.fault == Fault::rope_off_by_one) pos += 1;
    float* row = x.data() + n * D;
    for (int64_t f = 0; f < half_r; ++f) {
      const int64_t a = first + (gptj ? 2 * f : f), b = first + (gptj ? 2 * f + 1 : f + half_r);
      if (v.rope == RopeMath::exact && v.fault == Fault::none) {  // fp64 angle and rotation, rounded once
        const double t = double(pos) * inv64[size_t(f)], xa = row[a], xb = row[b];
        row[a] = static_cast<float>(xa * std::cos(t) - xb * std::sin(t));
        row[b] = static_cast<float>(xb * std::cos(t) + xa * std::sin(t));
        continue;
      }
      float c, s;
      {
        const float inv =
            1.0f / std::pow(static_cast<float>(p.rope_theta), static_cast<float>(2 * f) / static_cast<float>(r));
        float t = static_cast<float>(pos) * inv;
        if (v.fault == Fault::rope_fp16_angles) t = half(t);
        c = std::cos(t), s = std::sin(t);
        if (v.rope == RopeMath::table_fp16) c = half(c), s = half(s);
        if (v.rope == RopeMath::table_bf16) c = bf16(c), s = bf16(s);
      }
      const float xa = row[a], xb = row[b];
      row[a] = xa * c - xb * s;
      row[b] = xb * c + xa * s;
    }
    if (p.dtype != DType::f32)
      for (int64_t d = 0; d < D; ++d) row[d] = static_cast<float>(round_to(p.dtype, row[d]));
  }
}

// QK-norm as a fused kernel does it, on rows of Dqk floats in fp32: r = 1 / sqrtf(mean(x^2) + eps), x_d r w_d,
// before RoPE. The faults live here.
void qk_norm_rows(const Variant& v, const Problem& p, bool query, int64_t rows, std::vector<float>& x) {
  const std::vector<double>& w = query ? p.q_norm_weight : p.k_norm_weight;
  if (w.empty() || (!query && v.fault == Fault::qk_norm_k_skipped)) return;
  const int64_t D = p.Dqk;
  const float eps = static_cast<float>(p.qk_norm_eps);
  for (int64_t n = 0; n < rows; ++n) {
    float* row = x.data() + n * D;
    float ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += row[d] * row[d];
    const float ms = ss / static_cast<float>(D);
    const float r = v.fault == Fault::qk_norm_eps_ignored   ? 1.0f / std::sqrt(ms)
                    : v.fault == Fault::qk_norm_eps_outside ? 1.0f / (std::sqrt(ms) + eps)
                                                            : 1.0f / std::sqrt(ms + eps);
    for (int64_t d = 0; d < D; ++d) row[d] = row[d] * r * static_cast<float>(w[size_t(d)]);
  }
}

struct Row {
  std::vector<float> s;  // scores (-inf where not visible)
  std::vector<char> vis;
  std::vector<float> logit;  // what the max-logit output takes the max of (natural units, -inf where not visible)
};
}  // namespace

Outputs run_variant(const Variant& v, const Problem& p, const Inputs& in) {
  if (p.page_size > 0) {  // a paged cache read through the block table, as the kernel addresses the pool
    Problem read = p;
    if (v.fault == Fault::index_overflow)
      for (int64_t& page : read.block_table) page %= index_wrap_pages(p);
    const Attended flat = gather_pages(read, in);
    return run_variant(v, flat.p, flat.in);
  }
  const int64_t Lq = p.Lq, Lk = p.Lk, D = p.Dqk, Dv = p.Dv;
  const bool is_f32 = p.dtype == DType::f32;
  auto load = [&](const Tensor& t) {
    const std::vector<double> d = t.to_double();
    std::vector<float> f(d.begin(), d.end());
    if (v.fault == Fault::tf32_operands && is_f32)
      for (float& x : f) x = tf32(x);
    return f;
  };
  // A quantized KV cache decoded as a kernel does, each code * its scale (+ q4_1's m) in fp32 (the product exact:
  // int8 or 4-bit codes, fp16 scales; one rounding of the sum); the descale faults read no scale or block 0's scale
  // of the token, the 4-bit faults are described at their enum.
  auto decode = [&](int which) {
    const Tensor& codes = which == 1 ? in.k : in.v;
    const Tensor& s = which == 1 ? *in.k_scale : *in.v_scale;
    const Tensor* mins = p.kv_dtype == DType::q4_1 ? &*(which == 1 ? in.k_min : in.v_min) : nullptr;
    const int64_t L = p.Lk, E = which == 1 ? p.Dqk : p.Dv;
    std::vector<float> f(static_cast<size_t>(L * E));
    for (int64_t j = 0; j < L; ++j)
      for (int64_t e = 0; e < E; ++e) {
        int64_t sj = j, se = e;  // where the scale (and m) are read
        if (v.fault == Fault::descale_wrong_group) se = 0;
        if (v.fault == Fault::q4_next_block_scale && (se += kQ4Block) >= E && j + 1 < L) se = 0, ++sj;
        if (se >= E) se = e;  // the last token's last block: nothing after it
        const double scale = v.fault == Fault::descale_ignored ? 1.0 : kv_scale_at(p, s, 0, 0, sj, se);
        double code = kv_code_at(p, codes, 0, 0, j, v.fault == Fault::q4_nibble_swapped ? e ^ (kQ4Block / 2) : e);
        if (v.fault == Fault::q4_offset_ignored) code += 8;
        const float m =
            mins && v.fault != Fault::q4_min_ignored ? static_cast<float>(kv_scale_at(p, *mins, 0, 0, sj, se)) : 0.0f;
        f[size_t(j * E + e)] = static_cast<float>(code) * static_cast<float>(scale) + m;
      }
    return f;
  };
  std::vector<float> q = load(in.q), k = p.kv_quantized() ? decode(1) : load(in.k);
  std::vector<float> vv = p.kv_quantized() ? decode(2) : load(in.v);
  if (p.mla && (v.fault == Fault::mla_v_stride || v.fault == Fault::mla_v_columns)) {  // V read from the latent cache
    const std::vector<float> cache = load(in.k);                                       // [Lk, Dqk], as loaded
    for (int64_t j = 0; j < Lk; ++j)
      for (int64_t e = 0; e < Dv; ++e)
        vv[size_t(j * Dv + e)] =
            v.fault == Fault::mla_v_stride ? cache[size_t(j * Dv + e)] : cache[size_t(j * D + D - Dv + e)];
  }
  qk_norm_rows(v, p, true, p.Hq * Lq, q), qk_norm_rows(v, p, false, Lk, k);
  if (uses_rope(p)) rope_rows(v, p, true, p.Hq * Lq, q), rope_rows(v, p, false, Lk, k);
  const float scale = static_cast<float>(v.fault == Fault::scale_dv        ? 1.0 / std::sqrt(double(Dv))
                                         : v.fault == Fault::mla_scale_dim ? 1.0 / std::sqrt(double(D))
                                                                           : p.effective_scale());
  const float log2e = 1.4426950408889634f;
  // Faults placed once per problem: the middle tile, one random key.
  const int64_t skip_lo = (Lk / 64 / 2) * 64;
  const int64_t random_key = static_cast<int64_t>(std::mt19937_64(p.Lk * 7919 + 17)() % static_cast<uint64_t>(Lk));

  // Modifications (the grid's alibi, document and chunk flavours), each fault at the one place it lives.
  const ModSet mods(p);
  const bool shifted_key = (v.fault == Fault::document_off_by_one && !p.doc_ids.empty()) ||
                           (v.fault == Fault::chunk_off_by_one && p.chunk_size > 0);
  // The block-sparse fault: the first partial 64 x 64 block (query block, key block) of the exact block mask.
  int64_t partial_q = -1, partial_k = -1;
  if (v.fault == Fault::block_partial_as_full && mods.has_mask()) {
    const BlockMask bm = derive_block_mask(p, in, 64, 64);
    for (int64_t q = 0; q < bm.q_blocks && partial_q < 0; ++q)  // batch 0, head 0: rows q of the counts
      if (bm.kv_num_blocks[size_t(q)] > 0) partial_q = q, partial_k = bm.kv_indices[size_t(q * bm.slots)];
  }

  Outputs o;
  o.out = Tensor(p.fp8_out ? DType::f32 : p.dtype, {1, p.Hq, Lq, Dv});  // fp8: O in fp32 before the epilogue
  o.lse = Tensor(DType::f32, {1, p.Hq, Lq});
  if (p.max_logit == MaxLogitOut::rows) o.max_logit = Tensor(DType::f32, {1, p.Hq, Lq});
  for (int64_t row = 0; row < p.Hq * Lq; ++row) {  // query heads share the one KV head
    const int64_t h = row / Lq, i = row % Lq;
    const int64_t diag = i + p.diagonal_offset(0);
    Row r{std::vector<float>(static_cast<size_t>(Lk), -kInf), std::vector<char>(static_cast<size_t>(Lk), 0),
          std::vector<float>(static_cast<size_t>(Lk), -kInf)};
    for (int64_t j = 0; j < Lk; ++j) {
      bool vis = true;
      if (p.causal && j > diag) vis = false;
      if (p.window_left >= 0 && j < diag - p.window_left) vis = false;
      if (p.window_right >= 0 && j > diag + p.window_right) vis = false;
      // Mask faults live in the mask code, so they act only where that mask is on (as in a real kernel, a problem
      // without the mask has no such bug; the diagnoser's "mask removed" probes rely on it).
      if (v.fault == Fault::causal_excl_diag && p.causal && j == diag && diag % 64 == 0)
        vis = false;  // diagonal tile's first key
      if (v.fault == Fault::causal_future_key && p.causal && j == diag + 1 && diag % 64 == 63)
        vis = true;  // next tile's key
      if (v.fault == Fault::window_off_by_one && p.window_left >= 0 && j == diag - p.window_left - 1) vis = true;
      if (v.fault == Fault::skip_tile && j >= skip_lo && j < skip_lo + 64) vis = false;
      if (v.fault == Fault::drop_random_key && j == random_key) vis = false;
      if (vis && mods.has_mask()) vis = mods.visible(ModAt{0, h, i, diag, shifted_key ? std::min(j + 1, Lk - 1) : j});
      if (i / 64 == partial_q && j / 64 == partial_k) vis = true;  // block_partial_as_full: no mask in the block
      if (v.fault == Fault::topk_padding && p.topk > 0 && j == 0 && p.topk_indices[size_t((i + 1) * p.topk - 1)] == -1)
        vis = true;  // the row's list ends in padding: its first -1 gathered as key 0
      r.vis[static_cast<size_t>(j)] = vis;
      if (!vis) continue;
      // The dot product in `lanes` interleaved partial sums (SIMD lanes, tensor-core k-slices), combined pairwise;
      // the reversed order also runs it last to first.
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t n = 0; n < D; ++n) {
        const int64_t d = v.order == Order::reversed ? D - 1 - n : n;
        float& a = part[n % v.lanes];
        a = v.fma ? std::fma(q[size_t(row * D + d)], k[size_t(j * D + d)], a)
                  : a + q[size_t(row * D + d)] * k[size_t(j * D + d)];
      }
      for (int w = v.lanes / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; ++l) part[l] += part[l + w];
      const float dot = part[0];
      float sc = v.exp2 ? dot * (scale * log2e) : dot * scale;
      float natural = dot * scale;  // the max-logit output's stage: after the logit stage (and modifications)
      if (mods.has_logit()) {       // the logit stage in natural units, as an fp32 kernel; exp2: base 2 after it
        natural = mods.logit_f32(ModAt{0, h, i, diag, j}, natural);
        sc = v.exp2 ? natural * log2e : natural;
      }
      r.logit[static_cast<size_t>(j)] = v.fault == Fault::max_logit_stage      ? dot * scale  // before the stage
                                        : v.fault == Fault::max_logit_unscaled ? dot          // before the scale
                                                                               : natural;
      if (mods.has_score() && v.fault != Fault::alibi_ignored) {  // the additive term in fp64, added once
        double add = mods.score(ModAt{0, v.fault == Fault::alibi_slope_head ? (h + 1) % p.Hq : h, i, diag, j}, 0.0);
        if (v.fault == Fault::alibi_sign) add = -add;
        sc = v.exp2 ? static_cast<float>(double(dot * scale) + add) * log2e : static_cast<float>(double(sc) + add);
        r.logit[static_cast<size_t>(j)] = static_cast<float>(double(natural) + add);
      }
      if (v.fault == Fault::fp16_scores) sc = half(sc);
      r.s[static_cast<size_t>(j)] = sc;
    }
    if (v.fault == Fault::drop_max_key) {
      const auto it = std::max_element(r.s.begin(), r.s.end());
      r.vis[static_cast<size_t>(it - r.s.begin())] = 0;
      *it = -kInf;
    }
    auto ex = [&](float x) {  // exp of a max-subtracted score (base 2 with the folded scale)
      float e = v.exp2 ? std::exp2(x) : std::exp(x);
      if (v.ftz && e < std::numeric_limits<float>::min()) e = 0;
      return e;
    };
    auto pv_term = [&](float pj) { return v.p_rounded ? static_cast<float>(round_to(p.dtype, pj)) : pj; };
    std::vector<float> acc(static_cast<size_t>(Dv), 0.0f);
    float l = 0, m = -kInf;
    if (v.order != Order::online) {
      for (int64_t j = 0; j < Lk; ++j) m = std::max(m, r.s[size_t(j)]);
      std::vector<float> pj(static_cast<size_t>(Lk), 0.0f), t(static_cast<size_t>(Lk));
      for (int64_t j = 0; j < Lk; ++j)
        if (r.vis[size_t(j)]) pj[size_t(j)] = ex(r.s[size_t(j)] - m);
      l = sum_terms(pj, v.order);
      for (int64_t d = 0; d < Dv; ++d) {
        for (int64_t j = 0; j < Lk; ++j) t[size_t(j)] = pv_term(pj[size_t(j)]) * vv[size_t(j * Dv + d)];
        acc[size_t(d)] = sum_terms(t, v.order);
      }
    } else {
      bool rescale_missed = false;
      for (int64_t j0 = 0; j0 < Lk; j0 += v.block) {
        const int64_t j1 = std::min(Lk, j0 + v.block);
        float bm = -kInf;
        for (int64_t j = j0; j < j1; ++j) bm = std::max(bm, r.s[size_t(j)]);
        const float m_new = std::max(m, bm);
        if (m_new == -kInf) continue;
        float alpha = m == -kInf ? 0.0f : ex(m - m_new);
        if (v.fault == Fault::missed_rescale && !rescale_missed && j0 > 0 && m_new > m) {
          alpha = 1.0f;  // the first tile boundary where the running max grows keeps the old scale
          rescale_missed = true;
        }
        l *= alpha;
        for (float& a : acc) a *= alpha;
        for (int64_t j = j0; j < j1; ++j) {
          if (!r.vis[size_t(j)]) continue;
          const float pj = ex(r.s[size_t(j)] - m_new);
          l += pj;
          const float pr = pv_term(pj);
          for (int64_t d = 0; d < Dv; ++d) {
            float& a = acc[size_t(d)];
            a = v.fma ? std::fma(pr, vv[size_t(j * Dv + d)], a) : a + pr * vv[size_t(j * Dv + d)];
            if (v.fault == Fault::bf16_pv_accumulation) a = bf16(a);
          }
        }
        m = m_new;
      }
    }
    if (o.max_logit) {
      float ml = -kInf;
      for (int64_t j = 0; j < Lk; ++j)
        if (r.vis[size_t(j)]) ml = std::max(ml, r.logit[size_t(j)]);
      o.max_logit->set_offset(row, ml);
    }
    float lse = v.exp2 ? (m + std::log2(l)) / log2e : m + std::log(l);
    if (v.fault == Fault::lse_plus_log2) lse += std::log(2.0f);
    if (v.fault == Fault::lse_base2) lse = lse * log2e;
    o.lse->set_offset(row, lse);
    for (int64_t d = 0; d < Dv; ++d) {
      double x = round_to(p.dtype, acc[size_t(d)] / l);
      if (i == Lq / 2 + 1 && v.fault == Fault::row_1pct) x = round_to(p.dtype, x * 1.01);
      if (i == Lq / 2 + 1 && v.fault == Fault::row_4ulp && x != 0) {  // 4 units in the last place of the dtype
        const int mant = p.dtype == DType::f16 ? 10 : p.dtype == DType::bf16 ? 7 : 23;
        x += std::copysign(4.0 * std::ldexp(1.0, std::ilogb(x) - mant), x);
      }
      o.out.put(0, h, i, d, x);
    }
  }
  if (p.fp8_out) {  // the epilogue: O * scale_o rounded once to the fp8 format, amax of the fp32 O; its faults
    const Tensor values = std::move(o.out);
    o.out = Tensor(p.o_dtype, {1, p.Hq, Lq, Dv});
    o.amax_o = Tensor(DType::f32, {1});
    Problem e = p;
    if (v.fault == Fault::out_scale_ignored) e.scale_o = 1.0;
    if (v.fault == Fault::out_scale_inverted) e.scale_o = 1.0 / p.scale_o;
    store_fp8_out(e, values, o);
    double amax_cast = 0;
    for (double c : o.out.to_double()) amax_cast = std::max(amax_cast, std::abs(c) / p.scale_o);
    if (v.fault == Fault::amax_o_scaled) o.amax_o->set_offset(0, o.amax_o->get_offset(0) * p.scale_o);
    if (v.fault == Fault::amax_o_after_cast) o.amax_o->set_offset(0, amax_cast);
  }
  return o;
}

}  // namespace attncheck::power
