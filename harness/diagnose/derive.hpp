// Problems derived from a failing case, for hypotheses (the reference on a changed problem predicts what a given
// bug would output) and for probes (the candidate re-run on a changed problem). Each returns a valid case or throws.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "case.hpp"

namespace attncheck::diagnose {

// K and V with Hq heads where query head h reads KV head map(h) (GQA -> MHA with any head map).
prop::Case expand_kv_heads(const prop::Case& c, const std::function<int64_t(int64_t)>& map);
// Keys padded to Lk2 > Lk with zero K and V rows that every query sees with score 0 (canonical masks).
prop::Case pad_keys(const prop::Case& c, int64_t Lk2);
// Keys [j0, Lk) masked out for every query (canonical masks).
prop::Case mask_keys_from(const prop::Case& c, int64_t j0);
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
