// The looped reference of softmax(Q·Kᵀ·scale + bias/mask)·V, written like the per-token loops of the seed
// notebook: for each query token, for each key token a dot product; the row's softmax; the weighted sum of values.
// Inputs are widened exactly to double first; every mask is written out explicitly where it applies.
#include "attncheck/reference.hpp"

#include "attncheck/block_mask.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/rope.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "attncheck/row_trace.hpp"
#include "attncheck/schedule.hpp"
#include "attncheck/threads.hpp"

namespace attncheck {
inline namespace oracle {

namespace {

// Starting a thread costs tens of microseconds, and waits for a free core on a busy machine: a problem with less
// work than this (multiply-adds) runs on the calling thread, unless a thread count was asked for.
constexpr int64_t kWorkPerThread = int64_t(1) << 16;

bool thread_count_asked() { return current_schedule().threads > 0 || std::getenv("ATTNCHECK_THREADS") != nullptr; }

// A [B, H, L, D] tensor widened to contiguous double, BHSD order, so the loops below index it plainly; with a
// rotary embedding, every query (or key) vector rotated at its position (fp64), before any score.
std::vector<double> widen(const Problem& p, const RopeStage& rope, const Tensor& t, bool query) {
  std::vector<double> x = t.to_double();
  if (!rope.on()) return x;
  const int64_t H = query ? p.Hq : p.Hkv, L = query ? p.Lq : p.Lk;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        double* xi = &x[static_cast<size_t>(((b * H + h) * L + i) * p.Dqk)];
        query ? rope.query(b, i, xi) : rope.key(b, i, xi);
      }
  return x;
}

// The per-token loops over one problem: q (B, Hq, Lq, Dqk), k (B, Hkv, Lk, Dqk) and v (B, Hkv, Lk, Dv) in double,
// every mask composed, the score modifications.
struct Loops {
  const Problem& p;
  const Inputs& in;
  const ModSet mods{p};
  const DenseMask dense{p, in};
  const RopeStage rope{p};
  const std::vector<double> q = widen(p, rope, in.q, true), k = widen(p, rope, in.k, false), v = in.v.to_double();
  const double scale = p.effective_scale(), inf = std::numeric_limits<double>::infinity();
  const double fill = p.fill == MaskFill::neg_inf ? -inf : p.fill_value;

  // One row = one (batch, query head, query token). Rows share nothing, so any thread order gives the same bits.
  void row(int64_t row, ReferenceResult& r, RowObserver* observer) const {
    const int64_t Hq = p.Hq, Hkv = p.Hkv, Lq = p.Lq, Lk = p.Lk, Dqk = p.Dqk, Dv = p.Dv;
    const bool want_scores = !r.scores.empty();
    const int64_t b = row / (Hq * Lq), h = (row / Lq) % Hq, i = row % Lq;
    const int64_t kvh = h / (Hq / Hkv);  // GQA: query head h reads KV head h / group
    const double* qi = &q[static_cast<size_t>(((b * Hq + h) * Lq + i) * Dqk)];  // (Dqk)
    const double* kb = &k[static_cast<size_t>((b * Hkv + kvh) * Lk * Dqk)];     // (Lk, Dqk)
    const double* vb = &v[static_cast<size_t>((b * Hkv + kvh) * Lk * Dv)];      // (Lk, Dv)
    // The row's keys: [begin, end) (a packed sequence's own keys with varlen, else all Lk), the valid ones
    // (key padding) and the key on this query's diagonal.
    const Problem::RowKeys rk = p.row_keys(b, i);
    const auto in_row = [&](int64_t j) { return j >= rk.begin && j < rk.end; };

    // 1. scores: for each key token, visible -> scale * dot(q, k) (through the logit stage, plus bias); masked ->
    // fill.
    std::vector<double> s(static_cast<size_t>(Lk));
    std::vector<char> visible(static_cast<size_t>(Lk));
    const auto score_of = [&](int64_t j, bool staged) {  // scale * dot(q, k_j), through the logit stage when asked
      double dot = 0.0;
      for (int64_t d = 0; d < Dqk; ++d) dot += qi[d] * kb[j * Dqk + d];
      return staged && mods.has_logit() ? mods.logit(ModAt{b, h, i, rk.diag, j}, dot * scale) : dot * scale;
    };
    // Raw-score output: stages scaled and capped cover every key (ONNX adds the mask after them), so masked keys
    // are read here, and only here.
    double* out_s = want_scores ? &r.scores[static_cast<size_t>(row * Lk)] : nullptr;
    if (out_s && p.scores_out != ScoresOut::masked)
      for (int64_t j = 0; j < Lk; ++j) out_s[j] = score_of(j, p.scores_out != ScoresOut::scaled);
    dense.row(b, h, i, visible.data());  // every mask composed (block_mask.hpp)
    int64_t n_visible = 0;
    for (int64_t j = 0; j < Lk; ++j) {
      if (!visible[static_cast<size_t>(j)]) {
        s[static_cast<size_t>(j)] = fill;  // never touch a masked key: it may hold NaN on purpose
        continue;
      }
      double score = score_of(j, true);
      if (in.bias) score += in.bias->get_offset(broadcast_offset(*in.bias, b, h, i, j));
      if (mods.has_score()) {  // score modifications, after the bias
        const ModAt at{b, h, i, rk.diag, j};
        const double modified = mods.score(at, score);
        if (std::isfinite(score) && !std::isfinite(modified)) mods.expect_finite(at, score);  // throws
        score = modified;
      }
      s[static_cast<size_t>(j)] = score;
      ++n_visible;
    }
    if (out_s && p.scores_out == ScoresOut::masked) std::copy(s.begin(), s.end(), out_s);

    // 2. softmax of the row: max, exps, sum, normalise. A sink is one more term of the sum, without a value;
    //    a row keeps its sink even when no key is visible (then every key weighs 0 and lse = sink).
    const double sink = p.sink(h);
    double m = -inf;
    for (int64_t j = 0; j < Lk; ++j)
      if (visible[static_cast<size_t>(j)]) m = std::max(m, s[static_cast<size_t>(j)]);
    const bool fully_masked = (n_visible == 0 || m == -inf) && sink == -inf;
    if (!r.max_logit.empty()) r.max_logit[size_t(row)] = m == -inf ? fill : m;  // the fill without a finite score
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
    if (p.want_weights) std::copy(w.begin(), w.end(), r.weights.begin() + row * Lk);

    // 3. weighted sum of value tokens; dropout drops (keep = 0) or rescales kept weights by 1/(1-p).
    //    A zero weight contributes nothing, even where the value is NaN (masked positions may be poisoned).
    double* oi = &r.out[static_cast<size_t>(row * Dv)];  // (Dv)
    for (int64_t j = 0; j < Lk; ++j) {
      const double wj = kept_weight(p, in, b, h, i, j, w[static_cast<size_t>(j)]);
      if (wj == 0.0) continue;
      for (int64_t d = 0; d < Dv; ++d) oi[d] += wj * vb[j * Dv + d];
    }
    // A packed sequence with no keys under the nan policy: the -inf softmax over zero keys is 0/0.
    if (fully_masked && p.fully_masked == FullyMasked::nan && rk.begin == rk.end)
      std::fill(oi, oi + Dv, std::numeric_limits<double>::quiet_NaN());
    // Otherwise a NaN there is a NaN weight times a masked value that may be a poisoned NaN of either sign, and
    // x86 returns whichever operand's NaN the compiler put first (-O1 and -O3 differed, so fixtures were not
    // byte-identical across builds): written as the one quiet NaN. Only NaNs change (a dropped key still adds 0).
    if (fully_masked && p.fully_masked == FullyMasked::nan)
      for (int64_t d = 0; d < Dv; ++d)
        if (std::isnan(oi[d])) oi[d] = std::numeric_limits<double>::quiet_NaN();
    if (observer) observer->row(RowTrace{row, b, h, i, kvh, qi, kb, vb, rk, s, visible, w, fully_masked, oi});
  }
};

// The loops on every row, or on the query rows `rows` of every batch and head.
ReferenceResult looped(const Problem& p, const Inputs& in, const std::vector<int64_t>& rows, int threads,
                       RowObserver* observer) {
  const int64_t B = p.B, Hq = p.Hq, Lq = p.Lq, Lk = p.Lk;
  const int64_t n_rows = B * Hq * (rows.empty() ? Lq : static_cast<int64_t>(rows.size()));
  if (threads <= 0 && !thread_count_asked() && n_rows * Lk * (p.Dqk + p.Dv) < kWorkPerThread) threads = 1;
  const Loops loops{p, in};
  ReferenceResult r;
  r.out.assign(static_cast<size_t>(B * Hq * Lq * p.Dv), 0.0);
  r.lse.assign(static_cast<size_t>(B * Hq * Lq), 0.0);
  if (p.want_weights) r.weights.assign(static_cast<size_t>(B * Hq * Lq * Lk), 0.0);
  if (p.scores_out != ScoresOut::none) r.scores.assign(static_cast<size_t>(B * Hq * Lq * Lk), 0.0);
  if (p.max_logit != MaxLogitOut::none) r.max_logit.assign(static_cast<size_t>(B * Hq * Lq), 0.0);
  if (observer) observer->start(LoopedProblem{p, in, loops.mods, loops.rope, loops.v, threads});
  const auto one_row = [&](int64_t row) { loops.row(row, r, observer); };
  r.sampled_rows = rows;
  for (int64_t i : rows)
    if (i < 0 || i >= Lq)
      throw std::invalid_argument("rows: query row " + std::to_string(i) + " outside [0, " + std::to_string(Lq) + ")");
  const int64_t n = static_cast<int64_t>(rows.size());
  if (rows.empty())
    parallel_rows(B * Hq * Lq, threads, one_row);
  else
    parallel_rows(B * Hq * n, threads, [&](int64_t k) { one_row((k / n) * Lq + rows[static_cast<size_t>(k % n)]); });
  return r;
}

}  // namespace

ReferenceResult reference_attention(const Problem& p, const Inputs& in, int threads) {
  return reference_attention_rows(p, in, {}, threads);
}

ReferenceResult reference_attention_rows(const Problem& p, const Inputs& in, const std::vector<int64_t>& rows,
                                         int threads, RowObserver* observer) {
  validate(p, in);
  if (p.past_len > 0) {
    // KV-cache append: attend over present = concat(past, new); present itself is an expected output.
    const Attended a = attend_over_present(p, in);
    ReferenceResult r = reference_attention_rows(a.p, a.in, rows, threads, observer);
    r.present_k = a.in.k.to_double();
    r.present_v = a.in.v.to_double();
    return r;
  }
  if (p.page_size > 0) {  // paged KV cache: the keys and values read through the block table
    const Attended a = gather_pages(p, in);
    return reference_attention_rows(a.p, a.in, rows, threads, observer);
  }
  if (p.kv_quantized()) {  // quantized KV cache: every code times its scale, exactly (in double)
    const Attended a = dequantize_kv(p, in, DType::f64);
    return reference_attention_rows(a.p, a.in, rows, threads, observer);
  }
  if (is_fp8(p.dtype)) {  // fp8: the codes decoded exactly, times the descale factors (in double)
    const Attended a = dequantize(p, in, DType::f64);
    return reference_attention_rows(a.p, a.in, rows, threads, observer);
  }
  return looped(p, in, rows, threads, observer);
}

}  // namespace oracle
}  // namespace attncheck
