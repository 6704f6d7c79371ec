// validate(Problem): the per-field ranges of the feature table, then the cross-field rules.
#include <cmath>

#include "attncheck/features.hpp"
#include "attncheck/fp8_out.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/mla.hpp"
#include "attncheck/mods.hpp"
#include "detail.hpp"

namespace attncheck {
inline namespace model {

using detail::fail;
using detail::kMaxElements;

namespace {
// A field's value as error messages print it (doubles as std::to_string does: "got 1.000000").
std::string message_value(const Problem& p, const Field& f) {
  if (const auto* m = std::get_if<double Problem::*>(&f.ref)) return std::to_string(p.**m);
  if (const auto* m = std::get_if<std::optional<double> Problem::*>(&f.ref))
    return (p.**m) ? std::to_string(*(p.**m)) : "unset";
  return field_text(p, f);
}
// Packed sequences: both offset lists, S + 1 entries each, 0 .. Lq and 0 .. Lk, nondecreasing; one batch entry;
// and the features whose meaning is per batch entry or over all Lk keys are refused.
void validate_varlen(const Problem& p) {
  const auto &q = p.cu_seqlens_q, &k = p.cu_seqlens_k;
  if (q.size() != k.size() || q.size() < 2)
    fail("cu_seqlens_q and cu_seqlens_k must both have S+1 >= 2 entries, got " + std::to_string(q.size()) + " and " +
         std::to_string(k.size()));
  auto offsets = [](const char* name, const std::vector<int64_t>& v, const char* L, int64_t len) {
    if (v.front() != 0 || v.back() != len)
      fail(std::string(name) + " must run from 0 to " + L + "=" + std::to_string(len) + ", got " + shape_string(v));
    for (size_t s = 1; s < v.size(); ++s)
      if (v[s] < v[s - 1]) fail(std::string(name) + " must be nondecreasing, got " + shape_string(v));
  };
  offsets("cu_seqlens_q", q, "Lq", p.Lq);
  offsets("cu_seqlens_k", k, "Lk", p.Lk);
  if (p.B != 1)
    fail("cu_seqlens_q: packed sequences need B=1 (the sequences are the batch), got B=" + std::to_string(p.B));
  if (!p.key_lengths.empty() || !p.causal_offsets.empty())
    fail(
        "cu_seqlens_q: packed sequences set each sequence's key length and diagonal; key_lengths and "
        "causal_offsets must be empty");
  if (p.scores_out != ScoresOut::none)
    fail(std::string("cu_seqlens_q: raw scores of packed sequences are not defined (scores_out=") +
         to_string(p.scores_out) + ")");
  if (p.past_len > 0) fail("cu_seqlens_q: KV-cache append of packed sequences is not modelled (past_len > 0)");
  if (p.fully_masked == FullyMasked::uniform)
    for (size_t s = 0; s + 1 < q.size(); ++s)
      if (q[s + 1] > q[s] && k[s + 1] == k[s])
        fail("fully_masked=uniform: sequence " + std::to_string(s) +
             " has queries but no keys, so a uniform average over its keys is undefined");
}
// Paged KV cache: a pool of num_pages >= 1 pages and one page per (batch, block of page_size keys), each naming a
// page of the pool; appending into pages and packed sequences are not modelled with it.
void validate_paged(const Problem& p) {
  if (p.page_size == 0) {
    if (p.num_pages != 0 || !p.block_table.empty())
      fail("page_size: num_pages and block_table need page_size > 0 (a paged cache), got page_size=0, num_pages=" +
           std::to_string(p.num_pages) + " and " + std::to_string(p.block_table.size()) + " block_table entries");
    return;
  }
  if (p.num_pages < 1) fail("num_pages must be >= 1 with page_size > 0, got " + std::to_string(p.num_pages));
  const int64_t n = p.pages_per_seq();
  if (static_cast<int64_t>(p.block_table.size()) != p.B * n)
    fail("block_table must have B*ceil(Lk/page_size)=" + std::to_string(p.B) + "*" + std::to_string(n) +
         " entries, got " + std::to_string(p.block_table.size()));
  for (size_t e = 0; e < p.block_table.size(); ++e)
    if (p.block_table[e] < 0 || p.block_table[e] >= p.num_pages)
      fail("block_table[" + std::to_string(static_cast<int64_t>(e) / n) + "][" +
           std::to_string(static_cast<int64_t>(e) % n) + "] must be a page in [0, num_pages=" +
           std::to_string(p.num_pages) + "), got " + std::to_string(p.block_table[e]));
  if (p.past_len > 0) fail("page_size: KV-cache append into pages is not modelled (past_len > 0)");
  if (!p.cu_seqlens_q.empty()) fail("page_size: packed sequences (cu_seqlens_q) with a paged cache are not modelled");
}
}  // namespace

void validate(const Problem& p) {
  // 1. Each field's own range, from the feature table.
  for (const Field& f : problem_fields())
    if (f.valid && !f.valid(p)) fail(std::string(f.key) + " " + f.rule + ", got " + message_value(p, f));
  // 2. Rules across fields.
  if (p.Hq % p.Hkv != 0)
    fail("Hq must be a multiple of Hkv (MHA/GQA/MQA), got Hq=" + std::to_string(p.Hq) +
         " Hkv=" + std::to_string(p.Hkv));
  // Every tensor of the problem must be indexable in int64 with room to spare: element counts of q, k, v, out and
  // of [B,Hq,Lq,Lk] (weights, masks, keep) at most 2^60, so byte sizes and index arithmetic cannot overflow.
  auto count = [&](const char* what, std::initializer_list<std::pair<const char*, int64_t>> dims) {
    int64_t n = 1;
    std::string expr, vals;
    bool over = false;
    for (const auto& [name, v] : dims) {
      if (!expr.empty()) expr += '*', vals += ' ';
      expr += name;
      vals.append(name).append("=").append(std::to_string(v));
      over = over || __builtin_mul_overflow(n, v, &n) || n > kMaxElements;
    }
    if (over) fail(std::string(what) + " elements " + expr + " exceed 2^60 (" + vals + "): too large to index");
  };
  count("q", {{"B", p.B}, {"Hq", p.Hq}, {"Lq", p.Lq}, {"Dqk", p.Dqk}});
  count("k", {{"B", p.B}, {"Hkv", p.Hkv}, {"Lk", p.Lk}, {"Dqk", p.Dqk}});
  count("v", {{"B", p.B}, {"Hkv", p.Hkv}, {"Lk", p.Lk}, {"Dv", p.Dv}});
  count("out", {{"B", p.B}, {"Hq", p.Hq}, {"Lq", p.Lq}, {"Dv", p.Dv}});
  count("weights", {{"B", p.B}, {"Hq", p.Hq}, {"Lq", p.Lq}, {"Lk", p.Lk}});
  count("k pages", {{"num_pages", p.num_pages}, {"Hkv", p.Hkv}, {"page_size", p.page_size}, {"Dqk", p.Dqk}});
  count("v pages", {{"num_pages", p.num_pages}, {"Hkv", p.Hkv}, {"page_size", p.page_size}, {"Dv", p.Dv}});
  if (!p.key_lengths.empty()) {
    if (static_cast<int64_t>(p.key_lengths.size()) != p.B)
      fail("key_lengths must have B=" + std::to_string(p.B) + " entries, got " + std::to_string(p.key_lengths.size()));
    for (size_t b = 0; b < p.key_lengths.size(); ++b)
      if (p.key_lengths[b] < 0 || p.key_lengths[b] > p.Lk)
        fail("key_lengths[" + std::to_string(b) + "] must be in [0, Lk=" + std::to_string(p.Lk) + "], got " +
             std::to_string(p.key_lengths[b]));
  }
  if (!p.causal_offsets.empty()) {
    if (p.alignment != Alignment::explicit_)
      fail(std::string("causal_offsets are only meaningful with alignment=offset, got alignment=") +
           to_string(p.alignment));
    if (static_cast<int64_t>(p.causal_offsets.size()) != p.B)
      fail("causal_offsets must have B=" + std::to_string(p.B) + " entries, got " +
           std::to_string(p.causal_offsets.size()));
  }
  // Offsets and windows beyond 2^60 mean the same as 2^60 (sequences are shorter), but i + offset +- window would
  // overflow int64 in every implementation's mask test and silently mask the wrong keys.
  auto bounded = [](const std::string& field, int64_t v) {
    if (v > kMaxElements || v < -kMaxElements)
      fail(field + " must be within +-2^60 (" + std::to_string(kMaxElements) + "), got " + std::to_string(v));
  };
  for (size_t b = 0; b < p.causal_offsets.size(); ++b)
    bounded("causal_offsets[" + std::to_string(b) + "]", p.causal_offsets[b]);
  auto check_bcast = [&](const char* field, const std::array<int64_t, 4>& s) {
    const int64_t full[4] = {p.B, p.Hq, p.Lq, p.Lk};
    const char* dims[4] = {"B", "Hq", "Lq", "Lk"};
    for (int d = 0; d < 4; ++d)
      if (s[d] != 1 && s[d] != full[d])
        fail(std::string(field) + " shape " + shape_string({s[0], s[1], s[2], s[3]}) +
             " is not broadcastable to [B,Hq,Lq,Lk]=" + shape_string({p.B, p.Hq, p.Lq, p.Lk}) + ": dim " +
             std::to_string(d) + " (" + dims[d] + ") is " + std::to_string(s[d]) + ", expected 1 or " +
             std::to_string(full[d]));
  };
  if (!p.sinks.empty() && static_cast<int64_t>(p.sinks.size()) != p.Hq)
    fail("sinks must have Hq=" + std::to_string(p.Hq) + " entries (one per query head), got " +
         std::to_string(p.sinks.size()));
  if (!p.cu_seqlens_q.empty() || !p.cu_seqlens_k.empty()) validate_varlen(p);
  validate_modifications(p);
  validate_paged(p);
  validate_kv_cache(p);
  validate_fp8_out(p);
  validate_mla(p);
  if (p.mask_shape) check_bcast("mask", *p.mask_shape);
  if (p.bias_shape) {
    check_bcast("bias", *p.bias_shape);
    if (p.bias_dtype == DType::u8 || is_fp8(p.bias_dtype))
      fail(std::string("bias_dtype must be fp64, fp32, fp16 or bf16, got ") + to_string(p.bias_dtype));
  }
}

}  // namespace model
}  // namespace attncheck
