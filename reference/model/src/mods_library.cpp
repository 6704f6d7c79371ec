// The modification library: one block per entry, each the only place that describes it (parameters, rules,
// fp64 evaluation, capability name, marker, generator, tolerance fact). docs/problem-model.md "Modifications"
// gives the semantics and who does what. A new entry: its Problem members (problem.hpp) and one block here; the
// per-key arithmetic of the entries a CUDA kernel can evaluate is in mod_eval.hpp, which the kernels call too.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include "attncheck/mod_eval.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/rope.hpp"
#include "detail.hpp"
#include "mods_expr.hpp"

namespace attncheck {
inline namespace model {

using detail::fail;
using detail::kMaxElements;

namespace {

using P = Problem;
constexpr auto kSet = Stored::if_set;
constexpr auto kData = Stored::dataset;
constexpr auto kFrag = Named::fragment;

std::string n2s(int64_t v) { return std::to_string(v); }
void expect_size(const char* key, size_t got, int64_t want, const std::string& what) {
  if (static_cast<int64_t>(got) != want)
    fail(std::string(key) + " must have " + what + "=" + n2s(want) + " entries, got " + n2s(static_cast<int64_t>(got)));
}

// ---- softcap (Gemma 2's attn_logit_softcapping; FlashAttention's softcap) -----------------------------------
// c * tanh(s / c) of the scaled logit, before the bias: the logit stage (mods.hpp ModKind::logit).
const Field kSoftcap[] = {{"softcap", &P::softcap, Stored::attribute, kFrag, "must be a finite value >= 0 (0 = off)",
                           [](const P& p) { return p.softcap >= 0 && std::isfinite(p.softcap); },
                           "c*tanh(s/c) before bias and masks"}};
constexpr double kSoftcaps[] = {5.0, 20.0, 50.0};  // 50: Gemma 2's attention softcap; 20 and 5 saturate sooner
// constinit: Capabilities' default (every logit entry's name) reads it during other files' static initialisation.
constinit const ModEntry kSoftcapEntry{
    "softcap", "softcap", ModKind::logit, kSoftcap, [](const P& p) { return p.softcap > 0; }, [](const P&) {},
    [](const P& p, const ModAt&, double s) { return p.softcap * std::tanh(s / p.softcap); },
    // 1 - tanh^2(y) at y = s/c, written as 4e/(1+e)^2 with e = exp(-2|y|): accurate to a few ulps for every y.
    // 1 - t*t from the rounded t cancels: it is 0 in double from |y| ~ 19 on (docs/backward.md).
    [](const P& p, const ModAt&, double s) {
      const double e = std::exp(-2.0 * std::abs(s / p.softcap));
      return 4.0 * e / ((1.0 + e) * (1.0 + e));
    },
    nullptr, 1.0, [](P& p, Rng& r) { p.softcap = kSoftcaps[r.pick(0, 2)]; },
    "softcap: c * tanh(s / c) of the scaled logit, before the bias",
    2.0,                                         // a kernel's tanh (2 ulps)
    [](const P& p) { return 4.0 * p.softcap; },  // |c tanh| <= c: the tanh, the division and the product
    [](const P& p, double delta) { return 2.0 * delta / p.softcap; },  // |d log(1 - t^2) / ds| = 2|t|/c <= 2/c
    // 1 - t*t from the tanh t kept from the forward (FlashAttention): t carries <= 4u (a 2-ulp tanh), so 2|t|*4u,
    // plus u for t*t and u for the subtraction; where tanh saturates it is the whole derivative.
    10.0, kSoftcaps,
    [](const P& p, const ModAt&, float s) {
      const float c = static_cast<float>(p.softcap);
      return c * std::tanh(s / c);
    }};

// ---- ALiBi (Press et al.; FlashAttention's alibi_slopes) ----------------------------------------------------
// score - slope(b, h) * |pos - j|: FlashAttention documents "a bias of (-alibi_slope * |i + seqlen_k - seqlen_q -
// j|)", i.e. pos with alignment=bottom_right. Slopes are fp32 values, as FlashAttention takes them.
bool fp32_exact(double x) { return std::isfinite(x) && static_cast<double>(static_cast<float>(x)) == x; }
const Field kAlibi[] = {
    {"alibi_slopes", &P::alibi_slopes, kData, kFrag, "must be finite values exact in fp32",
     [](const P& p) { return std::all_of(p.alibi_slopes.begin(), p.alibi_slopes.end(), fp32_exact); },
     "ALiBi slope per query head [Hq] or per (batch, head) [B, Hq]"}};
double alibi_slope(const P& p, int64_t b, int64_t h) {
  const bool per_batch = static_cast<int64_t>(p.alibi_slopes.size()) != p.Hq;
  return p.alibi_slopes[static_cast<size_t>(per_batch ? b * p.Hq + h : h)];
}
const ModEntry kAlibiEntry{
    "alibi",
    "alibi",
    ModKind::score,
    kAlibi,
    [](const P& p) { return !p.alibi_slopes.empty(); },
    [](const P& p) {
      const int64_t n = static_cast<int64_t>(p.alibi_slopes.size());
      if (n != p.Hq && n != p.B * p.Hq)
        fail("alibi_slopes must have Hq=" + n2s(p.Hq) + " or B*Hq=" + n2s(p.B * p.Hq) + " entries, got " + n2s(n));
    },
    [](const P& p, const ModAt& a, double s) { return mod_eval::alibi(s, alibi_slope(p, a.b, a.h), a.pos, a.j); },
    [](const P&, const ModAt&, double) { return 1.0; },  // additive
    nullptr,
    1.0,
    [](P& p, Rng& r) {  // the paper's geometric slopes 2^(-8(h+1)/Hq) (fp32), per batch scaled by 2^-k
      const bool per_batch = p.B > 1 && r.pick(0, 1) == 1;
      for (int64_t b = 0; b < (per_batch ? p.B : 1); ++b)
        for (int64_t h = 0; h < p.Hq; ++h)
          p.alibi_slopes.push_back(static_cast<float>(std::exp2(-8.0 * double(h + 1) / double(p.Hq) - double(b))));
    },
    "ALiBi: score - slope * |pos - j|"};

// ---- T5 relative-position bias (Raffel et al.; transformers' T5Attention._relative_position_bucket) ---------
const Field kT5[] = {{"t5_table", &P::t5_table, kData, kFrag, "must be finite",
                      [](const P& p) {
                        return std::all_of(p.t5_table.begin(), p.t5_table.end(),
                                           [](double x) { return std::isfinite(x); });
                      },
                      "T5 relative-position bias [Hq, t5_buckets]"},
                     {"t5_buckets", &P::t5_buckets, kSet, kFrag, "must be in [0, 2^16] (0 = off)",
                      [](const P& p) { return p.t5_buckets >= 0 && p.t5_buckets <= 65536; }, "T5 buckets"},
                     {"t5_max_distance", &P::t5_max_distance, kSet, kFrag, "must be in [1, 2^40]",
                      [](const P& p) { return p.t5_max_distance >= 1 && p.t5_max_distance <= (int64_t{1} << 40); },
                      "T5: distance where the last bucket starts"},
                     {"t5_bidirectional", &P::t5_bidirectional, kSet, kFrag, nullptr, nullptr,
                      "T5: buckets for both signs of the distance (encoder) or only keys before the query (decoder)"}};
// The bucket of relative position rel = j - pos (mod_eval.hpp: transformers' formula, evaluated in double).
int64_t t5_bucket(const P& p, int64_t rel) {
  return mod_eval::t5_bucket(p.t5_buckets, p.t5_max_distance, p.t5_bidirectional, rel);
}
const ModEntry kT5Entry{
    "t5_bias",
    "t5",
    ModKind::score,
    kT5,
    [](const P& p) { return p.t5_buckets > 0 || !p.t5_table.empty(); },
    [](const P& p) {
      const int64_t min_buckets = p.t5_bidirectional ? 4 : 2;
      if (p.t5_buckets < min_buckets)
        fail("t5_buckets must be >= " + n2s(min_buckets) + " with t5_bidirectional=" + n2s(p.t5_bidirectional) +
             " and a t5_table, got " + n2s(p.t5_buckets));
      expect_size("t5_table", p.t5_table.size(), p.Hq * p.t5_buckets, "Hq*t5_buckets");
      const int64_t exact = (p.t5_bidirectional ? p.t5_buckets / 2 : p.t5_buckets) / 2;
      if (p.t5_max_distance <= exact)
        fail("t5_max_distance must be > " + n2s(exact) + " (the exact buckets), got " + n2s(p.t5_max_distance));
    },
    [](const P& p, const ModAt& a, double s) {
      return s + p.t5_table[static_cast<size_t>(a.h * p.t5_buckets + t5_bucket(p, a.j - a.pos))];
    },
    [](const P&, const ModAt&, double) { return 1.0; },  // additive
    nullptr,
    1.0,
    [](P& p, Rng& r) {
      p.t5_buckets = 2 * r.pick(2, 8);
      p.t5_max_distance = r.pick(p.t5_buckets, 4 * p.t5_buckets);
      p.t5_bidirectional = r.pick(0, 1) == 1;
      for (int64_t n = 0; n < p.Hq * p.t5_buckets; ++n) p.t5_table.push_back(std::ldexp(double(r.pick(-64, 64)), -4));
    },
    "T5 relative-position bias: score + table[h, bucket(j - pos)]"};

// ---- per-key logit bias (a score_mod reading bias[b, h, kv_idx], e.g. a learned or pruning bias per key) -------
const Field kKeyBias[] = {{"key_bias", &P::key_bias, kData, kFrag, "must be finite",
                           [](const P& p) {
                             return std::all_of(p.key_bias.begin(), p.key_bias.end(),
                                                [](double x) { return std::isfinite(x); });
                           },
                           "per-key logit bias [Hq, Lk] or [B, Hq, Lk]"}};
const ModEntry kKeyBiasEntry{
    "key_bias",
    "kbias",
    ModKind::score,
    kKeyBias,
    [](const P& p) { return !p.key_bias.empty(); },
    [](const P& p) {
      const int64_t n = static_cast<int64_t>(p.key_bias.size());
      if (n != p.Hq * p.Lk && n != p.B * p.Hq * p.Lk)
        fail("key_bias must have Hq*Lk=" + n2s(p.Hq * p.Lk) + " or B*Hq*Lk=" + n2s(p.B * p.Hq * p.Lk) +
             " entries, got " + n2s(n));
    },
    [](const P& p, const ModAt& a, double s) {
      const bool per_batch = static_cast<int64_t>(p.key_bias.size()) != p.Hq * p.Lk;
      return s + p.key_bias[static_cast<size_t>(((per_batch ? a.b * p.Hq : 0) + a.h) * p.Lk + a.j)];
    },
    [](const P&, const ModAt&, double) { return 1.0; },  // additive
    nullptr,
    1.0,
    [](P& p, Rng& r) {  // multiples of 1/16 in [-4, 4] (exact in every dtype), per batch or shared
      const int64_t n = (p.B > 1 && r.pick(0, 1) == 1 ? p.B : 1) * p.Hq * p.Lk;
      for (int64_t k = 0; k < n; ++k) p.key_bias.push_back(std::ldexp(double(r.pick(-64, 64)), -4));
    },
    "per-key logit bias: score + key_bias[b, h, j]"};

// ---- document mask (packed documents; FlexAttention's document_masking) ----------------------------------------
const Field kDoc[] = {{"doc_ids", &P::doc_ids, kData, kFrag, nullptr, nullptr, "document id per token [B, Lk]"}};
const ModEntry kDocEntry{"document",
                         "doc",
                         ModKind::mask,
                         kDoc,
                         [](const P& p) { return !p.doc_ids.empty(); },
                         [](const P& p) { expect_size("doc_ids", p.doc_ids.size(), p.B * p.Lk, "B*Lk"); },
                         nullptr,
                         nullptr,
                         [](const P& p, const ModAt& a) {  // a query outside [0, Lk) belongs to no document
                           const int64_t* d = p.doc_ids.data() + a.b * p.Lk;
                           return mod_eval::document(a.pos, a.j, p.Lk, [d](int64_t k) { return d[k]; });
                         },
                         1.0,
                         [](P& p, Rng& r) {
                           for (int64_t b = 0; b < p.B; ++b)
                             for (int64_t j = 0, id = 0; j < p.Lk; ++j) {
                               if (j > 0 && r.pick(0, 5) == 0) ++id;
                               p.doc_ids.push_back(id);
                             }
                         },
                         "document mask: doc_ids[b, pos] == doc_ids[b, j]"};

// ---- chunked local attention (Llama 4's chunked attention) --------------------------------------------------
const Field kChunk[] = {{"chunk_size", &P::chunk_size, kSet, kFrag, "must be in [0, 2^60] (0 = off)",
                         [](const P& p) { return p.chunk_size >= 0 && p.chunk_size <= kMaxElements; },
                         "chunked local attention: query and key in the same chunk of chunk_size tokens"}};
const ModEntry kChunkEntry{"chunked",
                           "chunk",
                           ModKind::mask,
                           kChunk,
                           [](const P& p) { return p.chunk_size > 0; },
                           [](const P&) {},
                           nullptr,
                           nullptr,
                           [](const P& p, const ModAt& a) { return mod_eval::chunked(a.pos, a.j, p.chunk_size); },
                           1.0,
                           [](P& p, Rng& r) { p.chunk_size = r.pick(1, std::max<int64_t>(p.Lk, 2)); },
                           "chunked local: floor(pos / C) == floor(j / C)"};

// ---- prefix-LM (bidirectional prefix, causal after it) --------------------------------------------------------
const Field kPrefix[] = {{"prefix_lengths", &P::prefix_lengths, kData, kFrag, nullptr, nullptr,
                          "prefix-LM: bidirectional prefix length per batch [B]"}};
const ModEntry kPrefixEntry{
    "prefix_lm",
    "prefix",
    ModKind::mask,
    kPrefix,
    [](const P& p) { return !p.prefix_lengths.empty(); },
    [](const P& p) {
      expect_size("prefix_lengths", p.prefix_lengths.size(), p.B, "B");
      for (int64_t v : p.prefix_lengths)
        if (v < 0 || v > p.Lk)
          fail("prefix_lengths must be in [0, Lk=" + n2s(p.Lk) + "], got " + shape_string(p.prefix_lengths));
    },
    nullptr,
    nullptr,
    [](const P& p, const ModAt& a) {
      return mod_eval::prefix_lm(a.pos, a.j, p.prefix_lengths[static_cast<size_t>(a.b)]);
    },
    1.0,
    [](P& p, Rng& r) {  // the entry is its own causal part: with causal on it would change nothing
      p.causal = false;
      for (int64_t b = 0; b < p.B; ++b) p.prefix_lengths.push_back(r.pick(0, p.Lk));
    },
    "prefix-LM: j < prefix_lengths[b] or j <= pos"};

// ---- dilated sliding window (Longformer) ------------------------------------------------------------------------
const Field kDilated[] = {
    {"dilated_window", &P::dilated_window, kSet, kFrag, "must be >= 0 or -1 (off), and at most 2^60",
     [](const P& p) { return p.dilated_window >= -1 && p.dilated_window <= kMaxElements; },
     "dilated window: keys per side, in steps of dilation"},
    {"dilation", &P::dilation, kSet, kFrag, "must be in [1, 2^30], and 1 without a dilated_window",
     [](const P& p) {
       return p.dilation >= 1 && p.dilation <= (int64_t{1} << 30) && (p.dilation == 1 || p.dilated_window >= 0);
     },
     "dilated window: step"}};
const ModEntry kDilatedEntry{
    "dilated_window",
    "dil",
    ModKind::mask,
    kDilated,
    [](const P& p) { return p.dilated_window >= 0; },
    [](const P&) {},
    nullptr,
    nullptr,
    [](const P& p, const ModAt& a) { return mod_eval::dilated(a.pos, a.j, p.dilated_window, p.dilation); },
    1.0,
    [](P& p, Rng& r) {
      p.dilation = r.pick(1, 4);
      p.dilated_window = r.pick(0, std::max<int64_t>(p.Lk / p.dilation, 1));
    },
    "dilated window: (pos - j) % dilation == 0 and |pos - j| / dilation <= dilated_window"};

// ---- top-k sparse attention (DeepSeek V3.2's index lists, as vLLM's flashmla_sparse passes them) --------------
// Per query token a list of topk key positions, shared by every head, padded with -1 at the end: the row attends
// exactly the listed keys (and what the other masks allow of them). Order is irrelevant; a duplicate, an index out of
// range and a -1 before a valid index are input errors naming the query and the slot.
const Field kTopk[] = {
    {"topk", &P::topk, kSet, kFrag, "must be in [0, 2^20] (0 = off)",
     [](const P& p) { return p.topk >= 0 && p.topk <= (int64_t{1} << 20); }, "top-k sparse: slots per query token"},
    {"topk_indices", &P::topk_indices, kData, kFrag, nullptr, nullptr,
     "top-k sparse: key positions per (batch, query token, slot) [B, Lq, topk], -1 = padding (trailing)"}};
const int64_t* topk_row(const P& p, int64_t b, int64_t i) { return p.topk_indices.data() + (b * p.Lq + i) * p.topk; }
const ModEntry kTopkEntry{
    "topk",
    "topk",
    ModKind::mask,
    kTopk,
    [](const P& p) { return p.topk > 0 || !p.topk_indices.empty(); },
    [](const P& p) {
      if (p.topk < 1) fail("topk must be >= 1 with topk_indices, got " + n2s(p.topk));
      if (p.B * p.Lq > kMaxElements / p.topk)
        fail("topk_indices: B*Lq*topk must be at most 2^60, got B*Lq=" + n2s(p.B * p.Lq) + " and topk=" + n2s(p.topk));
      expect_size("topk_indices", p.topk_indices.size(), p.B * p.Lq * p.topk, "B*Lq*topk");
      std::vector<std::pair<int64_t, int64_t>> listed;  // (key, slot) of one row, sorted to find a repeat
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t i = 0; i < p.Lq; ++i) {
          const int64_t* r = topk_row(p, b, i);
          const std::string at = "topk_indices[b=" + n2s(b) + ", query " + n2s(i) + ", slot ";
          listed.clear();
          for (int64_t s = 0; s < p.topk; ++s) {
            if (r[s] == -1) continue;
            if (r[s] < -1 || r[s] >= p.Lk)
              fail(at + n2s(s) + "] must be a key in [0, Lk=" + n2s(p.Lk) + ") or -1 (padding), got " + n2s(r[s]));
            if (s > 0 && r[s - 1] == -1)
              fail(at + n2s(s - 1) + "] is -1 (padding) before the key " + n2s(r[s]) + " in slot " + n2s(s) +
                   ": padding must be trailing");
            listed.emplace_back(r[s], s);
          }
          std::sort(listed.begin(), listed.end());
          for (size_t n = 1; n < listed.size(); ++n)
            if (listed[n].first == listed[n - 1].first)
              fail(at + n2s(listed[n].second) + "] repeats key " + n2s(listed[n].first) + " of slot " +
                   n2s(listed[n - 1].second) + " (duplicates are not modelled)");
        }
    },
    nullptr,
    nullptr,
    [](const P& p, const ModAt& a) {
      const int64_t* r = topk_row(p, a.b, a.i);
      return mod_eval::topk_listed(a.j, p.topk, [r](int64_t s) { return r[s]; });
    },
    1.0,
    [](P& p, Rng& r) {  // a random subset of the keys per query, in random order, the rest padding
      p.topk = r.pick(1, std::clamp<int64_t>(p.Lk, 1, 64));  // lists stay short: they are part of the name
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t i = 0; i < p.Lq; ++i) {
          std::vector<int64_t> keys(static_cast<size_t>(p.Lk));
          for (int64_t j = 0; j < p.Lk; ++j) keys[size_t(j)] = j;
          for (int64_t j = p.Lk - 1; j > 0; --j) std::swap(keys[size_t(j)], keys[size_t(r.pick(0, j))]);
          const int64_t n = r.pick(0, p.topk);
          for (int64_t s = 0; s < p.topk; ++s) p.topk_indices.push_back(s < n ? keys[size_t(s)] : -1);
        }
    },
    "top-k sparse: j is among topk_indices[b, i, :] (-1 = padding)"};

// ---- rotary position embedding (the position stage; its math: rope.hpp / rope.cpp) ------------------------------
// Not a score: q and k are rotated before the dot product. At most one frequency scaling.
bool finite_positive(double x) { return std::isfinite(x) && x > 0; }
const Field kRope[] = {
    {"rotary_dim", &P::rotary_dim, kSet, kFrag, "must be even and in [0, Dqk] (0 = off)",
     [](const P& p) { return p.rotary_dim >= 0 && p.rotary_dim % 2 == 0 && p.rotary_dim <= p.Dqk; },
     "RoPE: leading head dims rotated (the rest pass through)"},
    {"rotary_interleaved", &P::rotary_interleaved, kSet, kFrag, nullptr, nullptr,
     "RoPE: GPT-J pairs (2f, 2f+1); default GPT-NeoX halves (f, f + rotary_dim/2)"},
    {"rope_theta", &P::rope_theta, kSet, kFrag, "must be finite and > 0",
     [](const P& p) { return finite_positive(p.rope_theta); }, "RoPE base: inv_freq_f = theta^(-2f/rotary_dim)"},
    {"rope_offsets", &P::rope_offsets, kData, kFrag, nullptr, nullptr, "RoPE: position of key 0 per batch [B]"},
    {"rope_linear_factor", &P::rope_linear_factor, kSet, kFrag, "must be finite and > 0",
     [](const P& p) { return finite_positive(p.rope_linear_factor); }, "RoPE linear scaling: inv_freq / factor"},
    {"rope_llama3_factor", &P::rope_llama3_factor, kSet, kFrag, "must be finite and >= 1",
     [](const P& p) { return std::isfinite(p.rope_llama3_factor) && p.rope_llama3_factor >= 1; },
     "RoPE Llama 3.1 scaling factor"},
    {"rope_low_freq_factor", &P::rope_low_freq_factor, kSet, kFrag, "must be finite and > 0",
     [](const P& p) { return finite_positive(p.rope_low_freq_factor); }, "RoPE Llama 3.1 low_freq_factor"},
    {"rope_high_freq_factor", &P::rope_high_freq_factor, kSet, kFrag, "must be finite and > rope_low_freq_factor",
     [](const P& p) {
       return std::isfinite(p.rope_high_freq_factor) && p.rope_high_freq_factor > p.rope_low_freq_factor;
     },
     "RoPE Llama 3.1 high_freq_factor"},
    {"rope_yarn_factor", &P::rope_yarn_factor, kSet, kFrag, "must be finite and >= 1",
     [](const P& p) { return std::isfinite(p.rope_yarn_factor) && p.rope_yarn_factor >= 1; },
     "RoPE YaRN scaling factor"},
    {"rope_beta_fast", &P::rope_beta_fast, kSet, kFrag, "must be finite and > 0",
     [](const P& p) { return finite_positive(p.rope_beta_fast); }, "RoPE YaRN beta_fast"},
    {"rope_beta_slow", &P::rope_beta_slow, kSet, kFrag, "must be finite and > 0",
     [](const P& p) { return finite_positive(p.rope_beta_slow); }, "RoPE YaRN beta_slow"},
    {"rope_original_max", &P::rope_original_max, kSet, kFrag, "must be in [1, 2^24]",
     [](const P& p) { return p.rope_original_max >= 1 && p.rope_original_max <= kRopeMaxPosition; },
     "RoPE llama3/YaRN original_max_position_embeddings"},
    {"rope_mrope_section", &P::rope_mrope_section, kData, kFrag, "must have 1 to 8 entries, each >= 0",
     [](const P& p) {
       return p.rope_mrope_section.size() <= size_t(kRopeMaxSections) &&
              std::all_of(p.rope_mrope_section.begin(), p.rope_mrope_section.end(), [](int64_t v) { return v >= 0; });
     },
     "mRoPE (Qwen2-VL mrope_section): frequency pairs per section, in order, summing to rotary_dim/2"},
    {"rope_position_ids", &P::rope_position_ids, kData, kFrag, nullptr, nullptr,
     "mRoPE: position per section of each key-axis token [sections, B, Lk]; a query takes its diagonal key's"}};
// With mRoPE every query's diagonal key (whose ids it takes) must be in its row's key range.
void check_mrope(const P& p) {
  const size_t n = p.rope_mrope_section.size();
  if (n == 0) {
    if (!p.rope_position_ids.empty()) fail("rope_position_ids needs rope_mrope_section (mRoPE), got no sections");
    return;
  }
  int64_t sum = 0;
  for (int64_t v : p.rope_mrope_section) sum += v;
  if (sum != p.rotary_dim / 2)
    fail("rope_mrope_section must sum to rotary_dim/2=" + n2s(p.rotary_dim / 2) + ", got " +
         shape_string(p.rope_mrope_section));
  expect_size("rope_position_ids", p.rope_position_ids.size(), int64_t(n) * p.B * p.Lk, "sections*B*Lk");
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < p.Lq; ++i)
      if (const P::RowKeys rk = p.row_keys(b, i); rk.diag < rk.begin || rk.diag >= rk.end)
        fail("rope_position_ids: query " + n2s(i) + " of batch " + n2s(b) + " sits at key index " + n2s(rk.diag) +
             ", outside its keys [" + n2s(rk.begin) + ", " + n2s(rk.end) +
             ") (an mRoPE query takes the ids of the key on its diagonal)");
}
const ModEntry kRopeEntry{
    "rope",
    "rope",
    ModKind::position,
    kRope,
    [](const P& p) { return p.rotary_dim > 0; },  // the other parameters are inert at rotary_dim 0
    [](const P& p) {
      const bool varlen = !p.cu_seqlens_q.empty();  // one offset per packed sequence
      if (!p.rope_offsets.empty())
        expect_size("rope_offsets", p.rope_offsets.size(), varlen ? p.sequences() : p.B, varlen ? "S" : "B");
      for (int64_t v : p.rope_offsets)
        if (v < -kRopeMaxPosition || v > kRopeMaxPosition)
          fail("rope_offsets must be within +-2^24, got " + shape_string(p.rope_offsets));
      const int scalings = (p.rope_linear_factor != 1.0) + (p.rope_llama3_factor != 1.0) + (p.rope_yarn_factor != 1.0);
      if (scalings > 1)
        fail("rope_linear_factor, rope_llama3_factor and rope_yarn_factor: at most one scaling, got " + n2s(scalings));
      check_mrope(p);
      const char* field = p.rope_mrope_section.empty() ? "rope_offsets" : "rope_position_ids";
      auto in_range = [&](const RopeAt& at, const std::string& who) {
        for (int64_t s = 0; s < at.n; ++s)
          if (const int64_t pos = at.pos[size_t(s)]; pos < 0 || pos > kRopeMaxPosition)
            fail(std::string(field) + ": " + who + " is at RoPE position " + n2s(pos) +
                 ", outside [0, 2^24] (query i at its diagonal key index + diagonal offset, key j at j, both within "
                 "the sequence, plus rope_offsets; mRoPE: the ids at those indices plus rope_offsets)");
      };
      for (int64_t b = 0; b < p.B; ++b) {
        for (int64_t i = 0; i < p.Lq; ++i) in_range(rope_query_at(p, b, i), "query " + n2s(i) + " of batch " + n2s(b));
        for (int64_t j = 0; j < p.Lk; ++j) in_range(rope_key_at(p, b, j), "key " + n2s(j) + " of batch " + n2s(b));
      }
    },
    nullptr,
    nullptr,
    nullptr,
    1.0,
    [](P& p, Rng& r) {
      p.rotary_dim = 2 * r.pick(1, std::max<int64_t>(p.Dqk / 2, 1));
      if (p.rotary_dim > p.Dqk) p.rotary_dim = 0;  // Dqk 1: nothing to rotate
      p.rotary_interleaved = r.pick(0, 1) == 1;
      p.rope_theta = r.pick(0, 1) ? 10000.0 : 500000.0;
      int64_t lowest = 0;  // positions must not be negative: a query row may sit before key 0 (Lq > Lk)
      for (int64_t b = 0; b < p.B; ++b) lowest = std::min(lowest, p.diagonal_offset(b));
      for (int64_t b = 0; b < p.B; ++b) p.rope_offsets.push_back(r.pick(0, 1 << 17) - lowest);
    },
    "RoPE: q and k rotated pairwise by position * inv_freq before the scores"};

// ---- QK-norm (RMSNorm of each q and k head vector before RoPE; its math: qk_norm in rope.cpp) -------------------
bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}
const Field kQkNorm[] = {{"q_norm_weight", &P::q_norm_weight, kData, kFrag, "must be finite",
                          [](const P& p) { return all_finite(p.q_norm_weight); }, "QK-norm: RMSNorm weight of q [Dqk]"},
                         {"k_norm_weight", &P::k_norm_weight, kData, kFrag, "must be finite",
                          [](const P& p) { return all_finite(p.k_norm_weight); }, "QK-norm: RMSNorm weight of k [Dqk]"},
                         {"qk_norm_eps", &P::qk_norm_eps, kSet, kFrag, "must be finite and > 0",
                          [](const P& p) { return finite_positive(p.qk_norm_eps); },
                          "QK-norm: eps added to mean(x^2) (> 0: a zero vector stays finite)"}};
const ModEntry kQkNormEntry{"qk_norm",
                            "qknorm",
                            ModKind::position,
                            kQkNorm,
                            [](const P& p) { return uses_qk_norm(p); },
                            [](const P& p) {
                              expect_size("q_norm_weight", p.q_norm_weight.size(), p.Dqk, "Dqk");
                              expect_size("k_norm_weight", p.k_norm_weight.size(), p.Dqk, "Dqk");
                            },
                            nullptr,
                            nullptr,
                            nullptr,
                            1.0,
                            [](P& p, Rng& r) {  // weights near 1 as trained norms have them, exact in bf16
                              for (auto* w : {&p.q_norm_weight, &p.k_norm_weight})
                                for (int64_t d = 0; d < p.Dqk; ++d)
                                  w->push_back(1.0 + std::ldexp(double(r.pick(-32, 32)), -6));
                              p.qk_norm_eps = 1e-6;
                            },
                            "QK-norm: q and k head vectors RMS-normalised (weights [Dqk], eps) before RoPE"};

// ---- user expressions (muparser; compiled and evaluated in mods_expr.cpp) -------------------------------------
// The auxiliary tensors and the origin belong to both expressions; they are listed with the score entry.
bool with_expr(const P& p) { return !p.score_expr.empty() || !p.mask_expr.empty(); }
const char* const kNeedsExpr = "must be empty without score_expr or mask_expr";
const Field kScoreExpr[] = {
    {"score_expr", &P::score_expr, kSet, kFrag, "must be at most 4096 characters",
     [](const P& p) { return p.score_expr.size() <= 4096; },
     "score modification: expression over score, b, h, q_idx, kv_idx, q_pos and the expr_tensors"},
    {"expr_tensors", &P::expr_tensors, kSet, kFrag, kNeedsExpr,
     [](const P& p) { return p.expr_tensors.empty() || with_expr(p); },
     "auxiliary tensors of the expressions: name[d0,...];... (rank 1 to 4, values in expr_values)"},
    {"expr_values", &P::expr_values, kData, kFrag, kNeedsExpr,
     [](const P& p) { return p.expr_values.empty() || with_expr(p); },
     "values of the expr_tensors, concatenated in declaration order, each row-major"},
    {"expr_origin", &P::expr_origin, kData, kFrag, kNeedsExpr,
     [](const P& p) { return p.expr_origin.empty() || with_expr(p); },
     "[b, h, q_idx, kv_idx] added to the expressions' variables (a cut of a larger problem keeps its indices)"}};
const ModEntry kScoreExprEntry{
    "score_expr",
    "sexpr",
    ModKind::score,
    kScoreExpr,
    [](const P& p) { return !p.score_expr.empty(); },
    [](const P& p) { expr::check(p, expr::Which::score); },
    expr::score,
    expr::dscore,  // a checked numerical derivative (mods_expr.hpp)
    nullptr,
    0.0,                // any function of the score: |d score'/ds| is measured per key (ModSet::slope)
    [](P& p, Rng& r) {  // a linear position bias per head (ALiBi without the |.|), slopes exact in fp32
      p.score_expr = "score + slopes[h] * (kv_idx - q_pos)";
      p.expr_tensors = "slopes[" + n2s(p.Hq) + "]";
      for (int64_t h = 0; h < p.Hq; ++h) p.expr_values.push_back(std::ldexp(double(r.pick(1, 16)), -6));
    },
    "user score modification: an expression (muparser) over score, b, h, q_idx, kv_idx, q_pos, tensors"};
const Field kMaskExpr[] = {
    {"mask_expr", &P::mask_expr, kSet, kFrag, "must be at most 4096 characters",
     [](const P& p) { return p.mask_expr.size() <= 4096; },
     "mask modification: expression over b, h, q_idx, kv_idx, q_pos and the expr_tensors; nonzero = visible"}};
const ModEntry kMaskExprEntry{
    "mask_expr",
    "mexpr",
    ModKind::mask,
    kMaskExpr,
    [](const P& p) { return !p.mask_expr.empty(); },
    [](const P& p) { expr::check(p, expr::Which::mask); },
    nullptr,
    nullptr,
    expr::visible,
    1.0,
    [](P& p, Rng& r) {  // a window to the left of the query whose width depends on batch and head
      p.mask_expr = "kv_idx <= q_pos && kv_idx >= q_pos - width[b, h]";
      p.expr_tensors = "width[" + n2s(p.B) + "," + n2s(p.Hq) + "]";
      for (int64_t n = 0; n < p.B * p.Hq; ++n)
        p.expr_values.push_back(double(r.pick(0, std::max<int64_t>(p.Lk / 2, 1))));
    },
    "user mask modification: an expression (muparser) over b, h, q_idx, kv_idx, q_pos, tensors; nonzero = visible"};

// Score entries modify in this order (docs/problem-model.md "Modifications"): ALiBi, T5, the per-key bias, the
// user's expression.
const ModEntry kLibrary[] = {kAlibiEntry,   kT5Entry,   kKeyBiasEntry, kDocEntry,    kChunkEntry,     kPrefixEntry,
                             kDilatedEntry, kTopkEntry, kRopeEntry,    kQkNormEntry, kScoreExprEntry, kMaskExprEntry};

}  // namespace

std::span<const ModEntry> modifications() { return kLibrary; }
std::span<const ModEntry> logit_modifications() { return {&kSoftcapEntry, 1}; }

}  // namespace model
}  // namespace attncheck
