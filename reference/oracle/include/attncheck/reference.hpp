// The oracle: a naive, looped scaled dot-product attention that accumulates in double.
// It mirrors the per-token loops of a textbook derivation and is bitwise deterministic for any thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "attncheck/problem.hpp"
#include "attncheck/threads.hpp"  // default_threads()

namespace attncheck {

struct ReferenceResult {
  std::vector<double> out;                   // [B, Hq, Lq, Dv], row-major
  std::vector<double> lse;                   // [B, Hq, Lq]: natural log of the softmax denominator (always computed)
  std::vector<double> weights;               // [B, Hq, Lq, Lk], only when problem.want_weights
  std::vector<double> scores;                // [B, Hq, Lq, Lk], the raw scores at problem.scores_out (when not none)
  std::vector<double> present_k, present_v;  // [B, Hkv, Lk, Dqk|Dv]: concat(past, new), when problem.past_len > 0
  // [B, Hq, Lq], when problem.max_logit != none: the row maximum of the softmax input over visible keys (rows form;
  // judge() reduces it for heads), and its error scales: the largest KeyScales a, b, c over the row's visible keys.
  std::vector<double> max_logit, max_logit_a, max_logit_b, max_logit_c;
  // Their error magnitudes (KeyScales a and b of each score; 0 where the score is the fill): tolerance model.
  std::vector<double> scores_a, scores_b;
  // Error scales for the tolerance model (docs/tolerance.md), computed alongside in double:
  std::vector<double> score_mag;  // [B, Hq, Lq]: max over visible j of |scale|*|q_i|*|k_j| + |bias_ij|
  std::vector<double> out_abs;    // [B, Hq, Lq, Dv]: sum_j |w_ij * keep_ij/(1-p) * v_jd|
  // The tolerance model's row scales (docs/tolerance.md), with w' = w * keep/(1-p), dv_j = w'_j v_jd - w_j o_d and
  // the per-key score error magnitudes of KeyScales (a: accumulation, b: operand rounding, c: the score itself):
  std::vector<double> out_rss;  // [B, Hq, Lq, Dv]: sqrt(sum_j (w'_j v_jd)^2)
  // Repeated operands round alike, so their errors add before squaring: out_rss with the terms of keys sharing
  // one exact score (equal P) summed first (_p), and with the terms of keys sharing one value v_jd (_v).
  std::vector<double> out_rss_p, out_rss_v;  // [B, Hq, Lq, Dv]
  // (1/l) sum_j |keep_j v_jd| over keys whose unnormalised P_j = exp(s_j - m) is below 2^-14 (fp16's smallest
  // normal), 1/l = the largest weight: where P rounded to fp16 (or fp8 e5m2) is subnormal and errs by up to half
  // its spacing, not relatively.
  std::vector<double> out_sub;  // [B, Hq, Lq, Dv]
  // The same below 2^-6, fp8 e4m3's smallest normal (P rounded to e4m3).
  std::vector<double> out_sub_e4m3;  // [B, Hq, Lq, Dv]
  // Rounding q moves every key's score through one vector, so those errors are not independent across keys:
  // p_qbar = |scale| ||q o k_mean|| (k_mean = sum_j w_j k_j), what it moves lse by per unit; out_qdev =
  // sum_j |dv_j| |scale| ||q o (k_j - k_mean)||, what it moves o_d by (a common shift cancels, sum_j dv_j = 0).
  std::vector<double> p_qbar;    // [B, Hq, Lq]
  std::vector<double> out_qdev;  // [B, Hq, Lq, Dv]
  // Sums over keys below group copies of one key (equal a_j and b_j: equal dot-product errors) first; the
  // deviations take the larger of the per-key and the per-group sum.
  std::vector<double> out_dev;                          // [B, Hq, Lq, Dv]: sqrt(sum_j dv_j^2)
  std::vector<double> out_dev_a, out_dev_b, out_dev_c;  // [B, Hq, Lq, Dv]: sqrt(sum_j (a_j dv_j)^2), b, c alike
  std::vector<double> out_cov;                          // [B, Hq, Lq, Dv]: sum_j |s_j - s_mean| |dv_j|
  std::vector<double> p_rss;                      // [B, Hq, Lq]: sqrt(sum_j w_j^2), 1/sqrt(effective number of keys)
  std::vector<double> p_rss_a, p_rss_b, p_rss_c;  // [B, Hq, Lq]: sqrt(sum_j (w_j a_j)^2), b, c alike
  std::vector<double> spread;                     // [B, Hq, Lq]: sum_j w_j |s_j - s_mean|, s_mean = sum_j w_j s_j
  std::vector<double> n_terms;                    // [B, Hq, Lq]: keys taking part in the softmax sum
  std::vector<double> n_tied;  // [B, Hq, Lq]: most keys sharing one exact score (repeated terms drift)
  std::vector<double>
      p_small;  // [B, Hq, Lq]: sum of min(w_j, 2^-24) over keys with w_j < 2^-23 (what a running fp32 sum may absorb)
  // Rotary embedding (rotary_dim > 0; empty otherwise): each score's sensitivity to relative angle errors,
  // r_j = |scale| sum_f inv_freq_f |q_f| |k_jf| (|pos_i| + |pos_j|) over rotated pairs f (docs/tolerance.md "Rotary
  // angles"), summed as the output (sum_j |dv_j| r_j), lse (sum_j w_j r_j) and one score (max_j r_j) see it.
  std::vector<double> rope_dev;          // [B, Hq, Lq, Dv]
  std::vector<double> rope_p, rope_max;  // [B, Hq, Lq]
  // Query rows i computed (for every b, h); empty = all. Other rows hold zeros and are not judged (tolerance.hpp).
  std::vector<int64_t> sampled_rows;
};

// Per-key magnitudes of a score's rounding errors. a: the dot product's partial sums, sqrt(Dqk (dot^2/3 +
// sum_d (q_d k_d)^2 / 6)) * |scale| (sums that grow linearly and sums that random-walk); b: the products'
// operand rounding, sqrt(sum_d (q_d k_d)^2) * |scale|; c: the score itself, |s| (scale, bias, softcap, max).
struct KeyScales {
  std::vector<double> a, b, c;
  explicit KeyScales(size_t n) : a(n, 0.0), b(n, 0.0), c(n, 0.0) {}
  void set(size_t j, double scale, double dot, double qk2, double dqk, double score);
};

// Groups of equal finite values within each column of V (Lk, Dv), computed once per KV head: which v_jd share
// their value with another key of column d, and each group's keys, so a row sums its group terms column by column.
struct ValueGroups {
  std::vector<char> grouped;    // (Lk, Dv): 1 where another key of column d holds the same value
  std::vector<size_t> columns;  // (Dv + 1): column d's groups are columns[d] .. columns[d + 1] - 1
  std::vector<size_t> start;    // (groups + 1): group g's keys are keys[start[g]] .. keys[start[g + 1] - 1]
  std::vector<uint32_t> keys;
  std::vector<double> value;  // (groups): |v| of group g
};
ValueGroups value_groups(const double* v, int64_t Lk, int64_t Dv);

// One row's data for row_error_scales (spans of length Lk; V rows of length Dv).
struct RowInputs {
  const std::vector<double>& s;         // scores (finite where taking part)
  const std::vector<char>& takes_part;  // key takes part in the softmax sum
  const std::vector<double>& w;         // normalised weights
  const std::vector<double>& keep;      // 1, or keep_ij/(1-p) under dropout
  const KeyScales& mag;                 // per-key score error magnitudes
  const double* v;                      // (Lk, Dv)
  int64_t Dv;
  const ValueGroups* vgroups = nullptr;  // value_groups of v, or null (every value counted alone)
  const double* q = nullptr;             // (Dqk): the query row, with k (Lk, Dqk) and the scale: p_qbar, out_qdev
  const double* k = nullptr;
  int64_t Dqk = 0;
  double scale = 0;
};
// Computes row `row`'s error scales into r (out, sized vectors must be allocated; out must be final).
void row_error_scales(const RowInputs& x, size_t row, ReferenceResult& r);

void fill_error_scales(const Problem& p, const Inputs& in, ReferenceResult& r);

// Validates problem and inputs (throws std::invalid_argument), then computes in double.
// threads = 0: ATTNCHECK_THREADS or the hardware concurrency. Rows are independent, so results do not depend on it.
ReferenceResult reference_attention(const Problem& p, const Inputs& in, int threads = 0);
// The same, for the query rows `rows` only (each in [0, Lq), for every batch and head; empty = all rows): long
// contexts verified in minutes (docs/tolerance.md, "Sampled rows"). Pick the rows with sample_rows.
ReferenceResult reference_attention_rows(const Problem& p, const Inputs& in, const std::vector<int64_t>& rows,
                                         int threads = 0);
// About n query rows (sorted, distinct), always including the first and last row, the rows on both sides of every
// 64- and 128-key tile edge of the diagonal (as many as fit in n / 2), the first and last row whose causal or window
// diagonal enters the keys, the first and last fully masked row (mask-free criteria: causal, window, padding), and
// the rows with the largest |q_i| (the largest bound on |logit|); the rest evenly spaced.
std::vector<int64_t> sample_rows(const Problem& p, const Inputs& in, int64_t n);

// Run fn(row) for row in [0, n) on `threads` OS threads (0 = default). Each row must be independent.
void parallel_rows(int64_t n, int threads, const std::function<void(int64_t)>& fn);

}  // namespace attncheck
