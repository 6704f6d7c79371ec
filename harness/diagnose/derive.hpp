// Problems derived from a failing case, for hypotheses (the reference on a changed problem predicts what a given
// bug would output) and for probes (the candidate re-run on a changed problem). Each returns a valid case or throws.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "attncheck/mods.hpp"
#include "case.hpp"

namespace attncheck::diagnose {

// K and V with Hq heads where query head h reads KV head map(h) (GQA -> MHA with any head map).
prop::Case expand_kv_heads(const prop::Case& c, const std::function<int64_t(int64_t)>& map);
// Which keys a derived case lets query (b, h, i) see, given the case's own visibility of key j.
using Sees = std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j, bool visible)>;
// Every mask (causal, window, key padding, the boolean mask, the mask modifications) folded into one boolean mask
// [B, Hq, Lq, Lk] holding sees(b, h, i, j, visible) (without `sees`: the visibility itself); the bias expanded to
// full shape. The diagonal stays where it was (explicit offsets; packed sequences keep theirs), so every position
// RoPE, ALiBi and the score modifications read stays too: only the keys a query sees change.
prop::Case with_mask(const prop::Case& c, const Sees& sees = nullptr);
// Keys [j0, Lk) masked out for every query (with_mask).
prop::Case mask_keys_from(const prop::Case& c, int64_t j0);
// A causal diagonal or window edge moved by f (alignment, offsets, window sizes), and nothing else: the keys each
// query sees under the moved diagonal and every other mask of c, positions unchanged (with_mask). Moving the
// alignment itself would move RoPE's query positions and what ALiBi and the mask modifications read as well.
prop::Case diagonal_moved(const prop::Case& c, const std::function<void(Problem&)>& f);
// Every parameter of modification e at its default: the modification switched off.
void reset_modification(Problem& q, const ModEntry& e);
// q, k, v (and bias) converted to another dtype (rounded once).
prop::Case with_dtype(const prop::Case& c, DType t);
// One feature switched off: "causal", "window", "key padding", "mask", "bias", a logit-stage entry by its name
// (mods.hpp), "dropout"; the names of the features active in c, in that order.
prop::Case without(const prop::Case& c, const std::string& feature);
std::vector<std::string> active_features(const Problem& p);
// Poison (NaN, +-Inf or |x| > 1e6; a -inf bias is a legitimate mask and stays) in K, V, past K/V and bias slots that
// no query can see, replaced by 0: the reference result is unchanged by definition. `zeroed` counts the slots.
prop::Case zero_masked_poison(const prop::Case& c, int64_t& zeroed);
// The same problem with K and V as [B,Hkv,Lk,D]: a KV-cache past joined to the new tokens, a paged cache read
// through its block table (attend_over_present, gather_pages); c itself when neither applies.
prop::Case contiguous_kv(const prop::Case& c);
// A paged case whose block table is replaced: batch b's page k read from pool page page(b, k); throws (invalid
// argument) when a page is outside the pool.
prop::Case with_block_table(const prop::Case& c, const std::function<int64_t(int64_t b, int64_t k)>& page);
// c with the problem changed by f (inputs unchanged), validated.
prop::Case with_problem(const prop::Case& c, const std::function<void(Problem&)>& f);

}  // namespace attncheck::diagnose
