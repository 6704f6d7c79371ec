// Generated attention cases for the property suite: a CaseSpec is a small plain description (shapes, features,
// value distribution, seed) that RapidCheck generates and shrinks; build_case turns it into a Problem and Inputs
// deterministically. Values are a first-class axis (large logits, ties, one-hot rows, poison in masked slots...).
#pragma once

#include <cstdint>
#include <utility>
#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/rng.hpp"

namespace attncheck::prop {

// Value distributions. Published suites only use small uniform noise, which hides bugs; these do not.
enum class Values : uint8_t {
  normal,        // q, k, v ~ N(0, 1)
  large_logits,  // |scores| around 1e4 (fp32 exp overflows without max subtraction)
  beyond_fp16,   // raw q.k beyond the fp16 range (65504) before scaling
  tied_max,      // one strong key duplicated at several positions: tied maxima
  all_equal,     // every key equal: all scores of a row equal
  one_hot,       // q and k scaled one-hot vectors: near one-hot weight rows
  constant_v,    // every value equal
  tiny,          // q, k ~ 1e-3, v ~ 1e-5 (fp16 subnormals): absolute floors
  mixed,         // v rows alternate magnitudes 1e3 and 1e-3 with signs: cancellation
  count
};
const char* to_string(Values v);

struct CaseSpec {
  int64_t B = 1, Hq = 1, Hkv = 1, Lq = 1, Lk = 1, Dqk = 8, Dv = 8;
  DType dtype = DType::f32;
  Layout layout = Layout::BHSD;
  bool causal = false;
  Alignment alignment = Alignment::top_left;
  int64_t causal_offset = 0;       // with Alignment::explicit_
  bool per_batch_offsets = false;  // explicit_ only: offsets differ per batch
  bool key_padding = false;        // key_lengths in [0, Lk] per batch
  int mask_kind = 0;               // 0 none, 1 [B,Hq,Lq,Lk], 2 [1,1,Lq,Lk], 3 [B,1,1,Lk] (column mask)
  int mask_density = 70;           // percent of visible entries in the boolean mask
  int bias_kind = 0;               // 0 none, 1 [B,Hq,Lq,Lk], 2 [1,Hq,Lq,Lk] (ALiBi-like), 3 [B,1,1,Lk]
  int64_t window_left = -1, window_right = -1;
  std::vector<std::pair<std::string, double>> logit;  // logit-stage entries (mods.hpp) on: name, parameter
  bool finite_fill = false;                           // fill -1e9 instead of -inf
  FullyMasked fully_masked = FullyMasked::zero;
  int scale_kind = 0;  // 0 default 1/sqrt(d), 1 explicit positive, 2 zero, 3 negative
  double dropout_p = 0.0;
  Values values = Values::normal;
  bool poison = false;      // NaN / Inf / 1e30 in K, V (and full bias) slots no query can see
  bool empty_rows = false;  // force some fully-masked query rows
  bool want_lse = true, want_weights = true;
  uint64_t seed = 1;
  // Features beyond the plain softmax, set only by the properties about them (draw_spec leaves them off, so the other
  // properties, whose invariants assume a plain softmax, never see them and their draws stay as they were).
  int sinks_kind = 0;                      // 0 none, 1 finite sinks (every third head large), 2 even heads -inf
  ScoresOut scores_out = ScoresOut::none;  // the raw-score output's stage
  bool kv_append = false;         // the first past_len in [1, Lk) key/value tokens come as a past (KV-cache append)
  bool varlen = false;            // B = 1 split into 1-4 packed sequences (cu_seqlens; empty ones allowed)
  bool paged = false;             // K/V in pages of 1..Lk+1 tokens, 0-2 unused pages, batch 1 may share a page
  std::vector<std::string> mods;  // library modifications (mods.hpp) by name, parameters from each entry's draw

  const double* logit_of(const std::string& name) const;  // the entry's parameter, or nullptr when it is off
  std::string str() const;                                // every field, for messages and fixtures
  int64_t cost() const { return B * Hq * Lq * Lk * (Dqk + Dv); }
};

struct Case {
  CaseSpec spec;
  Problem p;
  Inputs in;
  std::string name() const;  // Problem::short_name() + "/" + values (regression fixture names)
};

// Draws a spec over the whole space. `C` provides int64_t pick(lo, hi) (inclusive; shrinks towards lo), so the
// same code serves RapidCheck (shrinking) and the deterministic selftest generator.
template <class C>
CaseSpec draw_spec(C& c);

// The deterministic chooser of the selftest and of replays: the shared counter-based generator (rng.hpp).
using SeededChooser = Rng;

// Remove what the implementation cannot do (unsupported features become off, unsupported dtypes another dtype);
// returns the list of features removed, for the coverage report.
std::vector<std::string> restrict_to(CaseSpec& s, const Capabilities& caps);
// Shrink batch, heads, head dims (to 4), and only then the lengths (they carry the tile edge cases) until
// cost <= budget.
void apply_budget(CaseSpec& s, int64_t budget);
// Make the spec consistent (Hq multiple of Hkv, offsets with explicit alignment, ...).
void normalise(CaseSpec& s);

Case build_case(const CaseSpec& s);

// Visibility of key j to query (b, h, i), written from the problem model's definitions (problem.hpp).
bool visible(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i, int64_t j);
bool row_fully_masked(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i);

// Derived cases used by metamorphic properties.
// Positional masks (causal, window, key padding) folded into a full boolean mask; bias expanded to full shape.
Case canonical(const Case& c);
// Keys [j0, j1) or queries [i0, i1) of a canonical case.
Case slice_keys(const Case& c, int64_t j0, int64_t j1);
Case slice_queries(const Case& c, int64_t i0, int64_t i1);
// Keys / queries permuted: new index n takes old index perm[n]. Canonical cases only.
Case permute_keys(const Case& c, const std::vector<int64_t>& perm);
Case permute_queries(const Case& c, const std::vector<int64_t>& perm);
// Replace non-finite or huge (|x| > 1e6) entries of K, V and bias by 0.
void depoison(Case& c);

// Normal variates for derived cases (Box-Muller on the shared generator).
double normal(SeededChooser& r);

}  // namespace attncheck::prop

#include "spec_draw.hpp"  // draw_spec<C>: the template body
