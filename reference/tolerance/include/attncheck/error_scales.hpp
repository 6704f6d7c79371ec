// The error scales of the tolerance model (docs/tolerance.md): per row and per output element, computed in double
// from the reference's own pass (the oracle hands each row out, row_trace.hpp), and the reference outputs together
// with them, which is what a judge needs (expected_attention).
#pragma once

#include <cstdint>
#include <vector>

#include "attncheck/reference.hpp"

namespace attncheck {
inline namespace tolerance {

struct ErrorScales {
  // The raw-score output's error magnitudes (KeyScales a and b of each score; 0 where the score is the fill), when
  // problem.scores_out != none: [B, Hq, Lq, Lk].
  std::vector<double> scores_a, scores_b;
  // The max-logit output's, when problem.max_logit != none: the largest KeyScales a, b, c over the row's visible
  // keys, [B, Hq, Lq].
  std::vector<double> max_logit_a, max_logit_b, max_logit_c;
  std::vector<double> score_mag;  // [B, Hq, Lq]: max over visible j of |scale|*|q_i|*|k_j| + |bias_ij|
  std::vector<double> out_abs;    // [B, Hq, Lq, Dv]: sum_j |w_ij * keep_ij/(1-p) * v_jd|
  // The row scales, with w' = w * keep/(1-p), dv_j = w'_j v_jd - w_j o_d and the per-key score error magnitudes of
  // KeyScales (a: accumulation, b: operand rounding, c: the score itself):
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
};

// The reference's outputs and the error scales they are judged by.
struct ExpectedAttention : ReferenceResult, ErrorScales {};

// reference_attention (_rows) and the error scales of the same pass; arguments as there.
ExpectedAttention expected_attention(const Problem& p, const Inputs& in, int threads = 0);
ExpectedAttention expected_attention_rows(const Problem& p, const Inputs& in, const std::vector<int64_t>& rows,
                                          int threads = 0);

// The error scales a fixture does not store, recomputed from its inputs (everything but score_mag and out_abs).
void fill_error_scales(const Problem& p, const Inputs& in, ExpectedAttention& r);

}  // namespace tolerance
}  // namespace attncheck
