// The looped reference of softmax(Q·Kᵀ·scale + bias/mask)·V, written like the per-token loops of the seed
// notebook: for each query token, for each key token a dot product; the row's softmax; the weighted sum of values.
// Inputs are widened exactly to double first; every mask is written out explicitly where it applies.
#include "attncheck/reference.hpp"

#include "attncheck/block_mask.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/rope.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "attncheck/schedule.hpp"
#include "attncheck/threads.hpp"

namespace attncheck {

namespace {

// Starting a thread costs tens of microseconds, and waits for a free core on a busy machine: a problem with less
// work than this (multiply-adds) runs on the calling thread, unless a thread count was asked for.
constexpr int64_t kWorkPerThread = int64_t(1) << 16;

bool thread_count_asked() { return current_schedule().threads > 0 || std::getenv("ATTNCHECK_THREADS") != nullptr; }

}  // namespace

void parallel_rows(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
  if (threads <= 0) threads = default_threads();
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(n, 1)));
  if (threads <= 1) {
    for (int64_t r = 0; r < n; ++r) fn(r);
    return;
  }
  // Rows are claimed from a shared counter, so a pool the OS made smaller still computes every row.
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  run_on_threads(threads, [&](int) {
    for (int64_t r; !failed && (r = next.fetch_add(1)) < n;) {
      try {
        fn(r);
      } catch (...) {
        failed = true;
        throw;
      }
    }
  }, Shortfall::fewer);
}

namespace {
// A [B, H, L, D] tensor widened to contiguous double, BHSD order, so the loops below index it plainly.
std::vector<double> widen(const Tensor& t) { return t.to_double(); }
}  // namespace

namespace {
// The rotary tolerance scales of one row (reference.hpp rope_dev, rope_p, rope_max): r_j = |scale| sum_f
// inv_freq_f |q_f| |k_jf| (|pos_i| + |pos_j|) for each visible key, summed as out, lse and a score see a relative
// angle error (docs/tolerance.md "Rotary angles"). Dropout's kept weights w' enter dv_j = w'_j v_jd - w_j o_d.
void rope_sensitivity(const Problem& p, const RopeStage& rope, int64_t b, int64_t i, const double* qi,
                      const double* kb, const std::vector<double>& w, const std::vector<char>& visible,
                      const double* vb, const Inputs& in, int64_t row, ReferenceResult& r) {
  const int64_t Lk = p.Lk, Dqk = p.Dqk, Dv = p.Dv, h = (row / p.Lq) % p.Hq;
  const RopeAt at_i = rope_query_at(p, b, i);
  const double scale = std::abs(p.effective_scale());
  const double* o = &r.out[static_cast<size_t>(row * Dv)];  // final (the caller computed it)
  const double keep_scale = 1.0 / (1.0 - p.dropout_p);
  double sum_p = 0, mx = 0;
  for (int64_t j = 0; j < Lk; ++j) {
    if (!visible[size_t(j)] || w[size_t(j)] == 0.0) continue;
    const double* kj = kb + j * Dqk;
    const RopeAt at_j = rope_key_at(p, b, j);
    double rj = 0;
    for (int64_t f = 0; f < p.rotary_dim / 2; ++f) {
      const auto [a, c] = rope_pair(p, f);
      const size_t s = static_cast<size_t>(rope.sections()[size_t(f)]);  // mRoPE: the pair's own positions
      rj += rope.inv_freq()[size_t(f)] * std::hypot(qi[a], qi[c]) * std::hypot(kj[a], kj[c]) *
            (std::abs(double(at_i.pos[s])) + std::abs(double(at_j.pos[s])));
    }
    rj *= scale;
    mx = std::max(mx, rj);
    sum_p += w[size_t(j)] * rj;
    double wk = w[size_t(j)];
    if (in.keep) wk = in.keep->get_offset(((b * p.Hq + h) * p.Lq + i) * Lk + j) != 0 ? wk * keep_scale : 0.0;
    for (int64_t d = 0; d < Dv; ++d)
      r.rope_dev[static_cast<size_t>(row * Dv + d)] += std::abs(wk * vb[j * Dv + d] - w[size_t(j)] * o[d]) * rj;
  }
  r.rope_p[size_t(row)] = sum_p;
  r.rope_max[size_t(row)] = mx;
}
}  // namespace

ReferenceResult reference_attention(const Problem& p, const Inputs& in, int threads) {
  return reference_attention_rows(p, in, {}, threads);
}

ReferenceResult reference_attention_rows(const Problem& p, const Inputs& in, const std::vector<int64_t>& rows,
                                         int threads) {
  validate(p, in);
  if (p.past_len > 0) {
    // KV-cache append: attend over present = concat(past, new); present itself is an expected output.
    const Attended a = attend_over_present(p, in);
    ReferenceResult r = reference_attention_rows(a.p, a.in, rows, threads);
    r.present_k = a.in.k.to_double();
    r.present_v = a.in.v.to_double();
    return r;
  }
  if (p.page_size > 0) {  // paged KV cache: the keys and values read through the block table
    const Attended a = gather_pages(p, in);
    return reference_attention_rows(a.p, a.in, rows, threads);
  }
  if (p.kv_quantized()) {  // quantized KV cache: every code times its scale, exactly (in double)
    const Attended a = dequantize_kv(p, in, DType::f64);
    return reference_attention_rows(a.p, a.in, rows, threads);
  }
  if (is_fp8(p.dtype)) {  // fp8: the codes decoded exactly, times the descale factors (in double)
    const Attended a = dequantize(p, in, DType::f64);
    return reference_attention_rows(a.p, a.in, rows, threads);
  }
  const int64_t B = p.B, Hq = p.Hq, Hkv = p.Hkv, Lq = p.Lq, Lk = p.Lk, Dqk = p.Dqk, Dv = p.Dv;
  const int64_t n_rows = B * Hq * (rows.empty() ? Lq : static_cast<int64_t>(rows.size()));
  if (threads <= 0 && !thread_count_asked() && n_rows * Lk * (Dqk + Dv) < kWorkPerThread) threads = 1;
  const double scale = p.effective_scale();
  const double inf = std::numeric_limits<double>::infinity();
  const double fill = p.fill == MaskFill::neg_inf ? -inf : p.fill_value;

  const ModSet mods(p);
  const DenseMask dense(p, in);
  std::vector<double> q = widen(in.q);  // (B, Hq, Lq, Dqk)
  std::vector<double> k = widen(in.k);  // (B, Hkv, Lk, Dqk)
  // Rotary embedding: every query and key vector rotated at its position (fp64), before any score.
  const RopeStage rope(p);
  if (rope.on()) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < Lq; ++i) rope.query(b, i, &q[static_cast<size_t>(((b * Hq + h) * Lq + i) * Dqk)]);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t j = 0; j < Lk; ++j) rope.key(b, j, &k[static_cast<size_t>(((b * Hkv + h) * Lk + j) * Dqk)]);
  }
  const std::vector<double> v = widen(in.v);  // (B, Hkv, Lk, Dv)

  ReferenceResult r;
  r.out.assign(static_cast<size_t>(B * Hq * Lq * Dv), 0.0);
  r.lse.assign(static_cast<size_t>(B * Hq * Lq), 0.0);
  if (p.want_weights) r.weights.assign(static_cast<size_t>(B * Hq * Lq * Lk), 0.0);
  const bool want_scores = p.scores_out != ScoresOut::none;
  if (want_scores)
    for (auto* e : {&r.scores, &r.scores_a, &r.scores_b}) e->assign(static_cast<size_t>(B * Hq * Lq * Lk), 0.0);
  r.score_mag.assign(static_cast<size_t>(B * Hq * Lq), 0.0);
  if (p.max_logit != MaxLogitOut::none)
    for (auto* e : {&r.max_logit, &r.max_logit_a, &r.max_logit_b, &r.max_logit_c}) e->assign(static_cast<size_t>(B * Hq * Lq), 0.0);
  if (rope.on()) {
    r.rope_dev.assign(static_cast<size_t>(B * Hq * Lq * Dv), 0.0);
    r.rope_p.assign(static_cast<size_t>(B * Hq * Lq), 0.0);
    r.rope_max.assign(static_cast<size_t>(B * Hq * Lq), 0.0);
  }
  r.out_abs.assign(static_cast<size_t>(B * Hq * Lq * Dv), 0.0);
  for (auto* e : {&r.out_rss, &r.out_rss_p, &r.out_rss_v, &r.out_sub, &r.out_sub_e4m3, &r.out_qdev, &r.out_dev, &r.out_dev_a, &r.out_dev_b, &r.out_dev_c, &r.out_cov}) e->assign(static_cast<size_t>(B * Hq * Lq * Dv), 0.0);
  for (auto* e : {&r.p_rss, &r.p_rss_a, &r.p_rss_b, &r.p_rss_c, &r.spread, &r.n_terms, &r.n_tied, &r.p_small, &r.p_qbar}) e->assign(static_cast<size_t>(B * Hq * Lq), 0.0);

  // Equal values in a column of V (constant V, one-hot or integer values) round alike: tolerance model only.
  std::vector<ValueGroups> vgroups(static_cast<size_t>(B * Hkv));
  parallel_rows(B * Hkv, threads, [&](int64_t bh) {
    vgroups[size_t(bh)] = value_groups(&v[static_cast<size_t>(bh * Lk * Dv)], Lk, Dv);
  });

  // One row = one (batch, query head, query token). Rows share nothing, so any thread order gives the same bits.
  const auto one_row = [&](int64_t row) {
    const int64_t b = row / (Hq * Lq), h = (row / Lq) % Hq, i = row % Lq;
    const int64_t kvh = h / (Hq / Hkv);  // GQA: query head h reads KV head h / group
    const double* qi = &q[static_cast<size_t>(((b * Hq + h) * Lq + i) * Dqk)];          // (Dqk)
    const double* kb = &k[static_cast<size_t>((b * Hkv + kvh) * Lk * Dqk)];             // (Lk, Dqk)
    const double* vb = &v[static_cast<size_t>((b * Hkv + kvh) * Lk * Dv)];              // (Lk, Dv)
    // The row's keys: [begin, end) (a packed sequence's own keys with varlen, else all Lk), the valid ones
    // (key padding) and the key on this query's diagonal.
    const Problem::RowKeys rk = p.row_keys(b, i);
    const int64_t diag = rk.diag;
    const auto in_row = [&](int64_t j) { return j >= rk.begin && j < rk.end; };

    // 1. scores: for each key token, visible -> scale * dot(q, k) (softcapped, plus bias); masked -> fill.
    std::vector<double> s(static_cast<size_t>(Lk));
    std::vector<char> visible(static_cast<size_t>(Lk));
    KeyScales ks(static_cast<size_t>(Lk));  // per-key error magnitudes: tolerance model only
    int64_t n_visible = 0;
    double q_norm = 0.0, score_mag = 0.0;  // for the tolerance model only
    for (int64_t d = 0; d < Dqk; ++d) q_norm += qi[d] * qi[d];
    q_norm = std::sqrt(q_norm);
    // The score of key j before masking: scale * dot(q, k), softcapped; the dot product and sum of squared
    // products feed the error scales.
    auto raw_score = [&](int64_t j, double& dot, double& qk2, double& capped) {
      dot = 0.0, qk2 = 0.0;
      for (int64_t d = 0; d < Dqk; ++d) {
        dot += qi[d] * kb[j * Dqk + d];
        qk2 += (qi[d] * kb[j * Dqk + d]) * (qi[d] * kb[j * Dqk + d]);
      }
      capped = p.softcap > 0 ? p.softcap * std::tanh(dot * scale / p.softcap) : dot * scale;
      return dot * scale;
    };
    // Raw-score output: stages scaled and capped cover every key (ONNX adds the mask after them), so masked keys
    // are read here, and only here.
    double* out_s = want_scores ? &r.scores[static_cast<size_t>(row * Lk)] : nullptr;
    auto record = [&](int64_t j, double value, double dot, double qk2) {
      if (!out_s) return;
      out_s[j] = value;
      r.scores_a[static_cast<size_t>(row * Lk + j)] =
          std::abs(scale) * std::sqrt(static_cast<double>(Dqk) * (dot * dot / 3.0 + qk2 / 6.0));
      r.scores_b[static_cast<size_t>(row * Lk + j)] = std::abs(scale) * std::sqrt(qk2);
    };
    for (int64_t j = 0; j < Lk && p.scores_out != ScoresOut::none && p.scores_out != ScoresOut::masked; ++j) {
      double dot, qk2, capped;
      const double scaled = raw_score(j, dot, qk2, capped);
      record(j, p.scores_out == ScoresOut::scaled ? scaled : capped, dot, qk2);
    }
    dense.row(b, h, i, visible.data());  // every mask composed (block_mask.hpp)
    for (int64_t j = 0; j < Lk; ++j) {
      const bool vis = visible[static_cast<size_t>(j)] != 0;
      if (!vis) {
        s[static_cast<size_t>(j)] = fill;  // never touch a masked key: it may hold NaN on purpose
        if (p.scores_out == ScoresOut::masked) record(j, fill, 0.0, 0.0);
        continue;
      }
      double dot, qk2, score;
      raw_score(j, dot, qk2, score);
      double k_norm = 0.0;
      for (int64_t d = 0; d < Dqk; ++d) k_norm += kb[j * Dqk + d] * kb[j * Dqk + d];
      double mag = std::abs(scale) * q_norm * std::sqrt(k_norm);
      if (in.bias) {
        const double bias = in.bias->get_offset(broadcast_offset(*in.bias, b, h, i, j));
        score += bias;
        mag += std::abs(bias);
      }
      if (mods.has_score()) {  // score modifications, after the bias: the score's error scaled by their slope
        const ModAt at{b, h, i, diag, j};
        const double modified = mods.score(at, score);
        if (std::isfinite(score) && !std::isfinite(modified)) mods.expect_finite(at, score);  // throws
        mag = mods.slope(at, score) * mag + std::abs(modified - score);
        score = modified;
      }
      if (std::isfinite(score)) score_mag = std::max(score_mag, mag);  // a -inf bias masks, it has no error
      if (std::isfinite(score)) ks.set(static_cast<size_t>(j), scale, dot, qk2, static_cast<double>(Dqk), score);
      s[static_cast<size_t>(j)] = score;
      if (p.scores_out == ScoresOut::masked) record(j, score, dot, qk2);
      ++n_visible;
    }

    // 2. softmax of the row: max, exps, sum, normalise. A sink is one more term of the sum, without a value;
    //    a row keeps its sink even when no key is visible (then every key weighs 0 and lse = sink).
    const double sink = p.sink(h);
    double m = -inf;
    for (int64_t j = 0; j < Lk; ++j)
      if (visible[static_cast<size_t>(j)]) m = std::max(m, s[static_cast<size_t>(j)]);
    const bool fully_masked = (n_visible == 0 || m == -inf) && sink == -inf;
    if (!r.max_logit.empty()) {  // the max-logit output: m itself (the fill without a finite visible score)
      const size_t n = static_cast<size_t>(row);
      r.max_logit[n] = m == -inf ? fill : m;
      for (int64_t j = 0; j < Lk; ++j)
        if (visible[static_cast<size_t>(j)] && std::isfinite(s[static_cast<size_t>(j)])) {
          r.max_logit_a[n] = std::max(r.max_logit_a[n], ks.a[static_cast<size_t>(j)]);
          r.max_logit_b[n] = std::max(r.max_logit_b[n], ks.b[static_cast<size_t>(j)]);
          r.max_logit_c[n] = std::max(r.max_logit_c[n], ks.c[static_cast<size_t>(j)]);
        }
    }
    std::vector<double> w(static_cast<size_t>(Lk), 0.0);
    double lse;
    if (!fully_masked) {
      if (p.fill == MaskFill::finite) m = std::max(m, fill);  // masked keys take part with the finite fill
      m = std::max(m, sink);
      double sum = sink == -inf ? 0.0 : std::exp(sink - m);
      for (int64_t j = 0; j < Lk; ++j) {
        const bool takes_part = visible[static_cast<size_t>(j)] || (p.fill == MaskFill::finite && in_row(j));
        w[static_cast<size_t>(j)] = takes_part ? std::exp(s[static_cast<size_t>(j)] - m) : 0.0;
        sum += w[static_cast<size_t>(j)];
      }
      for (double& x : w) x /= sum;
      lse = m + std::log(sum);
    } else {
      // No visible key: log(sum_j exp(fill)) and the declared policy decide.
      const double row_keys = static_cast<double>(rk.end - rk.begin);
      lse = p.fill == MaskFill::finite ? fill + std::log(row_keys) : -inf;
      const double wv = p.fully_masked == FullyMasked::nan       ? std::numeric_limits<double>::quiet_NaN()
                        : p.fully_masked == FullyMasked::uniform ? 1.0 / row_keys
                                                                 : 0.0;
      std::fill(w.begin() + rk.begin, w.begin() + rk.end, wv);  // keys of other packed sequences weigh 0
    }
    r.lse[static_cast<size_t>(row)] = lse;
    r.score_mag[static_cast<size_t>(row)] = score_mag;
    if (p.want_weights) std::copy(w.begin(), w.end(), r.weights.begin() + row * Lk);

    // 3. weighted sum of value tokens; dropout drops (keep = 0) or rescales kept weights by 1/(1-p).
    //    A zero weight contributes nothing, even where the value is NaN (masked positions may be poisoned).
    double* oi = &r.out[static_cast<size_t>(row * Dv)];         // (Dv)
    double* oi_abs = &r.out_abs[static_cast<size_t>(row * Dv)];  // (Dv)
    const double keep_scale = 1.0 / (1.0 - p.dropout_p);
    for (int64_t j = 0; j < Lk; ++j) {
      double wj = w[static_cast<size_t>(j)];
      if (in.keep) wj = in.keep->get_offset(((b * Hq + h) * Lq + i) * Lk + j) != 0 ? wj * keep_scale : 0.0;
      if (wj == 0.0) continue;
      for (int64_t d = 0; d < Dv; ++d) {
        oi[d] += wj * vb[j * Dv + d];
        oi_abs[d] += std::abs(wj * vb[j * Dv + d]);
      }
    }
    if (rope.on() && !fully_masked) rope_sensitivity(p, rope, b, i, qi, kb, w, visible, vb, in, row, r);
    // A packed sequence with no keys under the nan policy: the -inf softmax over zero keys is 0/0.
    if (fully_masked && p.fully_masked == FullyMasked::nan && rk.begin == rk.end)
      std::fill(oi, oi + Dv, std::numeric_limits<double>::quiet_NaN());
    // Otherwise a NaN there is a NaN weight times a masked value that may be a poisoned NaN of either sign, and
    // x86 returns whichever operand's NaN the compiler put first (-O1 and -O3 differed, so fixtures were not
    // byte-identical across builds): written as the one quiet NaN. Only NaNs change (a dropped key still adds 0).
    if (fully_masked && p.fully_masked == FullyMasked::nan)
      for (int64_t d = 0; d < Dv; ++d)
        if (std::isnan(oi[d])) oi[d] = std::numeric_limits<double>::quiet_NaN();
    if (!fully_masked || p.fully_masked == FullyMasked::uniform) {
      std::vector<double> keep(static_cast<size_t>(Lk), in.keep ? 0.0 : 1.0);
      if (in.keep)
        for (int64_t j = 0; j < Lk; ++j)
          if (in.keep->get_offset(((b * Hq + h) * Lq + i) * Lk + j) != 0) keep[static_cast<size_t>(j)] = keep_scale;
      std::vector<char> takes_part(static_cast<size_t>(Lk));
      for (int64_t j = 0; j < Lk; ++j)
        takes_part[static_cast<size_t>(j)] =
            in_row(j) && (fully_masked || visible[static_cast<size_t>(j)] || p.fill == MaskFill::finite);
      const std::vector<double> s_row = fully_masked ? std::vector<double>(static_cast<size_t>(Lk), 0.0) : s;
      row_error_scales(RowInputs{s_row, takes_part, w, keep, ks, vb, Dv,
                                                 &vgroups[size_t(b * Hkv + kvh)],
                                                 qi, kb, Dqk, scale}, static_cast<size_t>(row), r);
    }
  };
  r.sampled_rows = rows;
  for (int64_t i : rows)
    if (i < 0 || i >= Lq) throw std::invalid_argument("rows: query row " + std::to_string(i) + " outside [0, " + std::to_string(Lq) + ")");
  const int64_t n = static_cast<int64_t>(rows.size());
  if (rows.empty()) parallel_rows(B * Hq * Lq, threads, one_row);
  else parallel_rows(B * Hq * n, threads, [&](int64_t k) { one_row((k / n) * Lq + rows[static_cast<size_t>(k % n)]); });
  return r;
}

}  // namespace attncheck
