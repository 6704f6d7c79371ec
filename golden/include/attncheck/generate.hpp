// Deterministic, seeded, portable value generators for attention inputs: the golden suite and property tests
// use them so a seed names the same bits on every machine. Only integer arithmetic and IEEE +,*,/ are used (no
// libm calls whose last bit varies between C libraries), so generated inputs are identical everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/problem.hpp"
#include "attncheck/rng.hpp"

namespace attncheck::gen {

// The shared counter-based generator (attncheck/rng.hpp); golden inputs draw from it.
using Rng = attncheck::Rng;

// Value distributions of q, k, v (and what they stress):
//   normal         N(0,1) everywhere: the plain case.
//   uniform        U(-1,1): signed, bounded.
//   large_logits   q, k scaled so scores are around +-1e4: max subtraction / overflow in exp.
//   tied_maxima    every key is one of 3 vectors: many exactly tied maxima per row.
//   all_equal      all keys equal: every visible weight is exactly 1/n.
//   one_hot        one key per row dominates by a score gap of 40: weights are one-hot in fp32.
//   constant_v     v is 0.75 everywhere: out must be exactly 0.75 in rows with a visible key (normalisation).
//   tiny           q, k ~ 1e-3 and v ~ 1.5e-5 (fp16 subnormals): underflow, denormal handling.
//   poison_masked  N(0,1), but keys masked for every query (padding, masked columns, causal tail) hold NaN and
//                  +-huge values in k and v: a correct implementation never reads them into the result.
// Hazards (golden/src/generate_hazards.cpp), each a bug class of public trackers:
//   fp16_overflow  q, k ~ 2^8.5/Dqk^(1/4) * N(0,1): raw q.k around 2^17, beyond fp16's 65504; with a scale near
//                  2^-13 the softmax is finite and spread. An fp16 dot product overflows to inf.
//   logits_30_80   scores ~ N(0, 30^2): magnitudes 30-80, where exp(s) without the max overflows fp16 and fp32.
//   near_ties      every key is one of 3 vectors plus a 2^-9 relative perturbation: scores tie to ~1e-3.
//   neg_inf_bias   N(0,1), and the bias (required) is -inf where (i + j) % 3 == 0 and on the whole first query row:
//                  -inf reaching the softmax by addition, and a row masked by the bias alone.
//   tile_edge_dominant  N(0,1), but the keys on both sides of every 64-key tile edge (j % 64 == 0 or 63) score
//                  +8: the weight sits where tiling bugs drop, double-count or misalign keys.
//   one_hot_v      N(0,1) q, k; v_jd = 1 if d == j % Dv else 0: each output column sums the weights of its own keys,
//                  so a wrong key shows up in a known column.
//   uniform_rows   q = 0 (every score exactly 0 in any order of any dot product, so p_j = exp(0) = 1 and l = n
//                  exactly) and v small signed integers (-2..3; each (b, h, d) column of v sums to non-zero): with
//                  2^k visible keys the answer sum(v)/n is exact, the constructed case of `exact_out`.
enum class Distribution : uint8_t {
  normal,
  uniform,
  large_logits,
  tied_maxima,
  all_equal,
  one_hot,
  constant_v,
  tiny,
  poison_masked,
  fp16_overflow,
  logits_30_80,
  near_ties,
  neg_inf_bias,
  tile_edge_dominant,
  one_hot_v,
  uniform_rows
};
const char* to_string(Distribution d);
Distribution distribution_from_string(const std::string& s);  // throws std::invalid_argument naming the choices
const std::vector<Distribution>& all_distributions();

// Inputs for a validated problem: q, k, v by the distribution, and the mask (Bernoulli 3/4 attend), bias (N(0,1))
// and keep-mask (Philox, from problem.dropout_seed) when the problem declares them. Values are drawn in logical
// [B,H,L,D] order, so BHSD and BSHD problems with one seed hold the same values. Throws std::invalid_argument for
// poison_masked with a finite fill (masked values then legitimately reach fully masked rows).
Inputs generate_inputs(const Problem& p, Distribution d, uint64_t seed);

// Fills q, k, v (and plants the bias's -inf) for the hazard distributions; false for any other distribution.
bool fill_hazard(const Problem& p, Distribution d, Inputs& in, Rng& rq, Rng& rk, Rng& rv);

// Visit a [B,H,L,D] tensor in logical order: fn(b, h, l, d) returns the value.
template <class F>
void fill4(Tensor& t, F fn) {
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t h = 0; h < t.shape[1]; ++h)
      for (int64_t l = 0; l < t.shape[2]; ++l)
        for (int64_t d = 0; d < t.shape[3]; ++d) t.put(b, h, l, d, fn(b, h, l, d));
}

// Whether key j of batch b and KV head kvh is visible to at least one query of the problem (the masks of the
// reference: causal, window, key padding, boolean mask).
bool key_visible_anywhere(const Problem& p, const Inputs& in, int64_t b, int64_t kvh, int64_t j);

// Paged KV cache: moves contiguous k, v [B,Hkv,Lk,D] into the pages of p's block table (the reverse of
// gather_pages). A pool slot that several (b, j) map to (a shared page) takes the value of its first owner some
// query sees; a slot no (b, j) maps to (unused pages, the tail of a last page) holds NaN. No-op without paging.
void page_inputs(const Problem& p, Inputs& in);

}  // namespace attncheck::gen
