// The feature table (features.hpp): every Problem field once, with its range and storage, every optional feature
// once, with the capability that allows it; and the generic text conversion the name, spec and CLI layers share.
#include "attncheck/features.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "attncheck/mods.hpp"
#include "detail.hpp"

namespace attncheck {
inline namespace model {

using detail::fail;
using detail::kMaxElements;

namespace {

using P = Problem;
constexpr auto kAttr = Stored::attribute;
constexpr auto kFrag = Named::fragment;

bool finite_or_unset(const std::optional<double>& x) { return !x || std::isfinite(*x); }
bool window_ok(int64_t w) { return w >= -1 && w <= kMaxElements; }
bool descale_ok(const P& p, double d) { return std::isfinite(d) && d > 0 && (d == 1.0 || is_fp8(p.dtype)); }
bool kv_code_ok(DType t) { return t == DType::i8 || is_fp8(t) || is_q4(t); }
bool kv_scale_type_ok(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

const Field kFields[] = {
    {"B", &P::B, kAttr, Named::shape, "must be >= 1", [](const P& p) { return p.B >= 1; }, "batch"},
    {"Hq", &P::Hq, kAttr, Named::shape, "must be >= 1", [](const P& p) { return p.Hq >= 1; }, "query heads"},
    {"Hkv", &P::Hkv, kAttr, Named::shape, "must be >= 1", [](const P& p) { return p.Hkv >= 1; }, "key/value heads"},
    {"Lq", &P::Lq, kAttr, Named::shape, "must be >= 1", [](const P& p) { return p.Lq >= 1; }, "query length"},
    {"Lk", &P::Lk, kAttr, Named::shape, "must be >= 1", [](const P& p) { return p.Lk >= 1; }, "key length"},
    {"Dqk", &P::Dqk, kAttr, Named::shape, "must be >= 1", [](const P& p) { return p.Dqk >= 1; }, "q/k head dim"},
    {"Dv", &P::Dv, kAttr, Named::shape, "must be >= 1", [](const P& p) { return p.Dv >= 1; }, "v head dim"},
    {"dtype", &P::dtype, kAttr, Named::dtype, "must be a floating type (fp64, fp32, fp16, bf16, fp8_e4m3, fp8_e5m2)",
     [](const P& p) { return p.dtype != DType::u8; }, "q, k, v (and out, but bf16 for fp8)"},
    {"layout", &P::layout, kAttr, kFrag, nullptr, nullptr, "memory order of q, k, v, out"},
    {"scale", &P::scale, Stored::if_set, kFrag, "must be finite", [](const P& p) { return finite_or_unset(p.scale); },
     "score scale; unset = 1/sqrt(Dqk)"},
    {"effective_scale", DerivedF64{[](const P& p) { return p.effective_scale(); }}, Stored::derived, Named::no, nullptr,
     nullptr, "the scale in use"},
    {"causal", &P::causal, kAttr, kFrag, nullptr, nullptr, "key j visible to query i iff j <= i + offset"},
    {"alignment", &P::alignment, kAttr, kFrag, nullptr, nullptr, "where the causal/window diagonal sits"},
    {"causal_offset", &P::causal_offset, kAttr, kFrag, "must be within +-2^60",
     [](const P& p) { return p.causal_offset <= kMaxElements && p.causal_offset >= -kMaxElements; },
     "diagonal offset with alignment=offset"},
    {"mask_shape", &P::mask_shape, Stored::if_set, kFrag, nullptr, nullptr, "boolean mask, broadcast"},
    {"bias_shape", &P::bias_shape, Stored::if_set, kFrag, nullptr, nullptr, "additive bias, broadcast"},
    {"bias_dtype", &P::bias_dtype, kAttr, kFrag, nullptr, nullptr, "dtype of the bias"},
    {"window_left", &P::window_left, kAttr, kFrag, "must be >= 0 or -1 (unbounded), and at most 2^60",
     [](const P& p) { return window_ok(p.window_left); }, "keys left of the diagonal"},
    {"window_right", &P::window_right, kAttr, kFrag, "must be >= 0 or -1 (unbounded), and at most 2^60",
     [](const P& p) { return window_ok(p.window_right); }, "keys right of the diagonal"},
    {"fill", &P::fill, kAttr, kFrag, nullptr, nullptr, "what a masked score becomes"},
    {"fill_value", &P::fill_value, kAttr, kFrag, "must be finite with fill=finite",
     [](const P& p) { return p.fill != MaskFill::finite || std::isfinite(p.fill_value); }, "the finite fill"},
    {"fully_masked", &P::fully_masked, kAttr, kFrag, nullptr, nullptr, "output of a row with no visible key"},
    {"dropout_p", &P::dropout_p, kAttr, kFrag, "must be in [0, 1)",
     [](const P& p) { return p.dropout_p >= 0.0 && p.dropout_p < 1.0; }, "dropout probability"},
    {"dropout_seed", &P::dropout_seed, kAttr, kFrag, nullptr, nullptr, "Philox seed of the keep-mask"},
    {"want_weights", &P::want_weights, kAttr, kFrag, nullptr, nullptr, "output P [B,Hq,Lq,Lk]"},
    {"want_lse", &P::want_lse, kAttr, kFrag, nullptr, nullptr, "output lse [B,Hq,Lq]"},
    {"key_lengths", &P::key_lengths, Stored::dataset, kFrag, nullptr, nullptr, "valid keys per batch"},
    {"causal_offsets", &P::causal_offsets, Stored::dataset, kFrag, nullptr, nullptr, "diagonal offset per batch"},
    {"sinks", &P::sinks, Stored::dataset, kFrag, "must be finite or -inf (no sink)",
     [](const P& p) {
       return std::none_of(p.sinks.begin(), p.sinks.end(), [](double x) { return std::isnan(x) || x == HUGE_VAL; });
     },
     "sink logit per query head: joins the softmax denominator, has no value"},
    {"scores_out", &P::scores_out, Stored::if_set, kFrag, nullptr, nullptr,
     "raw scores output [B,Hq,Lq,Lk] at a stage (ONNX qk_matmul_output_mode 0-2)"},
    {"max_logit", &P::max_logit, Stored::if_set, kFrag, nullptr, nullptr,
     "max-logit output: the row max of the softmax input over visible keys, rows [B,Hq,Lq] or heads [Hq]"},
    {"past_len", &P::past_len, Stored::if_set, kFrag, "must be in [0, Lk) (at least one new key/value token)",
     [](const P& p) { return p.past_len >= 0 && p.past_len < p.Lk; },
     "KV-cache append: cached tokens before the new k/v; present = concat(past, new) is an output"},
    {"cu_seqlens_q", &P::cu_seqlens_q, Stored::dataset, kFrag, nullptr, nullptr,
     "packed sequences: S+1 query offsets (varlen; B = 1)"},
    {"cu_seqlens_k", &P::cu_seqlens_k, Stored::dataset, kFrag, nullptr, nullptr,
     "packed sequences: S+1 key offsets (varlen; B = 1)"},
    {"page_size", &P::page_size, Stored::if_set, kFrag, "must be in [0, 2^24] (0 = contiguous K/V)",
     [](const P& p) { return p.page_size >= 0 && p.page_size <= (int64_t{1} << 24); },
     "paged KV cache: tokens per page; k, v are the pages [num_pages,Hkv,page_size,D]"},
    {"num_pages", &P::num_pages, Stored::if_set, kFrag, "must be in [0, 2^40]",
     [](const P& p) { return p.num_pages >= 0 && p.num_pages <= (int64_t{1} << 40); },
     "paged KV cache: pages in the pool"},
    {"block_table", &P::block_table, Stored::dataset, kFrag, nullptr, nullptr,
     "paged KV cache: page of each (batch, block of page_size keys), [B, ceil(Lk/page_size)]"},
    {"descale_q", &P::descale_q, Stored::if_set, kFrag, "must be finite and > 0 (1 unless dtype is fp8)",
     [](const P& p) { return descale_ok(p, p.descale_q); },
     "fp8: q = descale_q * code (cuDNN descale_q, FA3 q_descale)"},
    {"descale_k", &P::descale_k, Stored::if_set, kFrag, "must be finite and > 0 (1 unless dtype is fp8)",
     [](const P& p) { return descale_ok(p, p.descale_k); }, "fp8: k = descale_k * code"},
    {"descale_v", &P::descale_v, Stored::if_set, kFrag, "must be finite and > 0 (1 unless dtype is fp8)",
     [](const P& p) { return descale_ok(p, p.descale_v); }, "fp8: v = descale_v * code"},
    // Quantized KV cache (kv_cache.hpp): appended here, written only when set, so older fixtures keep their bytes.
    {"kv_scales", &P::kv_scales, Stored::if_set, kFrag, nullptr, nullptr,
     "quantized KV cache: k, v = code * scale, one scale per tensor, (batch, KV head), token or head-dim block"},
    {"kv_dtype", &P::kv_dtype, Stored::if_set, kFrag, "must be int8, fp8_e4m3, fp8_e5m2, q4_0 or q4_1",
     [](const P& p) { return kv_code_ok(p.kv_dtype); }, "quantized KV cache: format of the k, v codes"},
    {"kv_block", &P::kv_block, Stored::if_set, kFrag, "must be in [1, 2^20]",
     [](const P& p) { return p.kv_block >= 1 && p.kv_block <= (int64_t{1} << 20); },
     "quantized KV cache: head-dim elements per scale with kv_scales=block (q8_0: 32)"},
    {"kv_scale_dtype", &P::kv_scale_dtype, Stored::if_set, kFrag, "must be fp32, fp16 or bf16",
     [](const P& p) { return kv_scale_type_ok(p.kv_scale_dtype); }, "quantized KV cache: format of the scales"},
    {"mla", &P::mla, Stored::if_set, kFrag, nullptr, nullptr,
     "absorbed MLA: v is the first Dv columns of k (one latent cache [c_kv | k_pe]); a fixture stores k alone"},
    {"fp8_out", &P::fp8_out, Stored::if_set, kFrag, nullptr, nullptr,
     "fp8 output: out = codes of O * scale_o, amax_o = max |O| (cuDNN sdpa_fp8)"},
    {"o_dtype", &P::o_dtype, Stored::if_set, kFrag, "must be fp8_e4m3 or fp8_e5m2",
     [](const P& p) { return is_fp8(p.o_dtype); }, "fp8 output: format of the out codes"},
    {"scale_o", &P::scale_o, Stored::if_set, kFrag, "must be finite and > 0",
     [](const P& p) { return std::isfinite(p.scale_o) && p.scale_o > 0; }, "fp8 output: stored = O * scale_o"},
};

// ---- text of one value ----
std::string num(int64_t v) { return std::to_string(v); }
std::string num(uint64_t v) { return std::to_string(v); }
std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back to the same double
  return std::string(buf, r.ptr);
}
template <class T>
T parse_num(const std::string& s, const char* key) {
  T v{};
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size())
    fail(std::string(key) + ": cannot read '" + s + "' as a number");
  return v;
}
template <class T = int64_t>
std::vector<T> parse_list(const std::string& s, char sep, const char* key) {
  std::vector<T> out;
  size_t a = 0;
  while (true) {
    const size_t b = s.find(sep, a);
    out.push_back(parse_num<T>(s.substr(a, b == std::string::npos ? b : b - a), key));
    if (b == std::string::npos) return out;
    a = b + 1;
  }
}
template <class T>
std::string join(const T* v, size_t n, char sep) {
  std::string o;
  for (size_t i = 0; i < n; ++i) {
    if (i) o.push_back(sep);
    o.append(num(v[i]));
  }
  return o;
}
// Text fields (expressions) in a name: '%', '/', space and anything outside printable ASCII as %XX, so the name
// stays one component per field and parses back to the same bytes.
std::string percent_encode(const std::string& s) {
  static const char hex[] = "0123456789ABCDEF";
  std::string o;
  for (const unsigned char c : s) {
    if (c == '%' || c == '/' || c <= ' ' || c > '~')
      o.append({'%', hex[c >> 4], hex[c & 15]});
    else
      o.push_back(static_cast<char>(c));
  }
  return o;
}
std::string percent_decode(const std::string& s, const char* key) {
  auto digit = [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      o.push_back(s[i]);
      continue;
    }
    const int hi = i + 2 < s.size() ? digit(s[i + 1]) : -1, lo = i + 2 < s.size() ? digit(s[i + 2]) : -1;
    if (hi < 0 || lo < 0)
      fail(std::string(key) + ": '%' at position " + std::to_string(i) +
           " must start an escape %XX (hex digits 0-9A-F), got '" + s + "'");
    o.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return o;
}

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;  // clang 14 (the fuzz and sanitizer builds) lacks C++20's implicit guide

}  // namespace

std::span<const Field> problem_fields() {
  // The base fields with the logit stage's parameters in their schema-1 place (after the window), then each
  // library modification's parameters (after them, so older fixtures keep their attribute order and bytes).
  static const std::vector<Field> all = [] {
    std::vector<Field> v;
    for (const Field& f : kFields) {
      v.push_back(f);
      if (std::string_view(f.key) == "window_right")
        for (const ModEntry& m : logit_modifications()) v.insert(v.end(), m.fields.begin(), m.fields.end());
    }
    for (const ModEntry& m : modifications()) v.insert(v.end(), m.fields.begin(), m.fields.end());
    return v;
  }();
  return all;
}

const Field* find_field(const std::string& key) {
  for (const Field& f : problem_fields())
    if (key == f.key) return &f;
  return nullptr;
}

std::string field_text(const Problem& p, const Field& f) {
  return std::visit(
      Overload{[&](DerivedF64 fn) { return num(fn(p)); }, [&](bool P::*m) { return std::string(p.*m ? "1" : "0"); },
               [&](std::optional<double> P::*m) { return (p.*m) ? num(*(p.*m)) : std::string(); },
               [&](std::optional<std::array<int64_t, 4>> P::*m) {
                 return (p.*m) ? join((p.*m)->data(), 4, 'x') : std::string();
               },
               [&](std::vector<int64_t> P::*m) { return join((p.*m).data(), (p.*m).size(), ','); },
               [&](std::vector<double> P::*m) { return join((p.*m).data(), (p.*m).size(), ','); },
               [&](std::string P::*m) { return percent_encode(p.*m); },
               [&](auto P::*m) -> std::string {
                 using T = std::remove_cvref_t<decltype(p.*m)>;
                 if constexpr (std::is_enum_v<T>)
                   return to_string(p.*m);
                 else
                   return num(p.*m);
               }},
      f.ref);
}

void set_field_text(Problem& p, const Field& f, const std::string& s) {
  std::visit(
      Overload{[&](DerivedF64) { fail(std::string(f.key) + ": is derived and cannot be set"); },
               [&](bool P::*m) {
                 if (s != "0" && s != "1") fail(std::string(f.key) + ": must be 0 or 1, got '" + s + "'");
                 p.*m = s == "1";
               },
               [&](std::optional<double> P::*m) { p.*m = parse_num<double>(s, f.key); },
               [&](std::optional<std::array<int64_t, 4>> P::*m) {
                 const auto v = parse_list(s, 'x', f.key);
                 if (v.size() != 4) fail(std::string(f.key) + ": must have 4 extents, got '" + s + "'");
                 p.*m = std::array<int64_t, 4>{v[0], v[1], v[2], v[3]};
               },
               [&](std::vector<int64_t> P::*m) { p.*m = parse_list(s, ',', f.key); },
               [&](std::vector<double> P::*m) { p.*m = parse_list<double>(s, ',', f.key); },
               [&](std::string P::*m) { p.*m = percent_decode(s, f.key); },
               [&](DType P::*m) { p.*m = dtype_from_string(s); }, [&](Layout P::*m) { p.*m = layout_from_string(s); },
               [&](Alignment P::*m) { p.*m = alignment_from_string(s); },
               [&](MaskFill P::*m) { p.*m = fill_from_string(s); },
               [&](FullyMasked P::*m) { p.*m = fully_masked_from_string(s); },
               [&](ScoresOut P::*m) { p.*m = scores_out_from_string(s); },
               [&](KvScales P::*m) { p.*m = kv_scales_from_string(s); },
               [&](MaxLogitOut P::*m) { p.*m = max_logit_from_string(s); },
               [&](auto P::*m) { p.*m = parse_num<std::remove_cvref_t<decltype(p.*m)>>(s, f.key); }},
      f.ref);
}

bool field_equal(const Problem& a, const Problem& b, const Field& f) {
  return std::visit(Overload{[&](DerivedF64 fn) { return fn(a) == fn(b) || (std::isnan(fn(a)) && std::isnan(fn(b))); },
                             [&](auto P::*m) { return a.*m == b.*m; }},
                    f.ref);
}

bool field_is_default(const Problem& p, const Field& f) { return field_equal(p, Problem{}, f); }

// ---- features ----------------------------------------------------------------------------------------------
namespace {

template <class T>
Support in_set(const std::set<T>& s, T v, const char* what) {
  return s.count(v) ? Support::yes() : Support::no(std::string(what) + " " + to_string(v) + " not supported");
}
bool uses_alignment(const P& p) { return p.causal || p.has_window(); }
Support head_dims(const Capabilities& c, const P& p) {
  if (c.max_head_dim > 0 && (p.Dqk > c.max_head_dim || p.Dv > c.max_head_dim))
    return Support::no("head dim " + std::to_string(std::max(p.Dqk, p.Dv)) + " > " + std::to_string(c.max_head_dim));
  if (c.head_dim_multiple > 1 && (p.Dqk % c.head_dim_multiple || p.Dv % c.head_dim_multiple))
    return Support::no("head dims (" + std::to_string(p.Dqk) + ", " + std::to_string(p.Dv) + ") not multiples of " +
                       std::to_string(c.head_dim_multiple));
  return Support::yes();
}
// A boolean capability's check is generated from its flag and its message; `protocol` is its worker-protocol
// name, `tag` its plugin extension.
#define ATTNCHECK_FLAG_EXT(name, protocol, member, used_expr, message, tag, backward_gap)                 \
  Feature {                                                                                               \
    name, protocol, [](const P& p) -> bool { return used_expr; },                                         \
        [](const Capabilities& c, const P&) { return c.member ? Support::yes() : Support::no(message); }, \
        &Capabilities::member, tag, backward_gap                                                          \
  }
#define ATTNCHECK_FLAG(name, protocol, member, used_expr, message) \
  ATTNCHECK_FLAG_EXT(name, protocol, member, used_expr, message, 0, nullptr)

const Feature kBeforeLogit[] = {
    {"dtype", "dtypes", [](const P&) { return true; },
     [](const Capabilities& c, const P& p) { return in_set(c.dtypes, p.dtype, "dtype"); }, nullptr, 0, nullptr},
    {"layout", "layouts", [](const P&) { return true; },
     [](const Capabilities& c, const P& p) { return in_set(c.layouts, p.layout, "layout"); }, nullptr, 0, nullptr},
    ATTNCHECK_FLAG("gqa", "gqa", gqa, p.Hq != p.Hkv, "GQA/MQA (Hq != Hkv) not supported"),
    ATTNCHECK_FLAG("lq!=lk", "cross", cross, p.Lq != p.Lk, "Lq != Lk not supported"),
    ATTNCHECK_FLAG("dqk!=dv", "dqk_ne_dv", dqk_ne_dv, p.Dqk != p.Dv, "Dqk != Dv not supported"),
    {"head-dims", "max_head_dim", [](const P&) { return true; }, head_dims, nullptr, 0, nullptr},
    ATTNCHECK_FLAG("causal", "causal", causal, p.causal, "causal mask not supported"),
    {"alignment", "alignments", uses_alignment,
     [](const Capabilities& c, const P& p) { return in_set(c.alignments, p.alignment, "alignment"); }, nullptr, 0,
     nullptr},
    ATTNCHECK_FLAG("per-batch-offsets", "per_batch_offsets", per_batch_offsets, !p.causal_offsets.empty(),
                   "per-batch causal offsets not supported"),
    ATTNCHECK_FLAG("key-padding", "key_padding", key_padding, !p.key_lengths.empty(), "key padding not supported"),
    ATTNCHECK_FLAG("bool-mask", "bool_mask", bool_mask, p.mask_shape.has_value(), "boolean mask not supported"),
    ATTNCHECK_FLAG("bias", "bias", bias, p.bias_shape.has_value(), "additive bias not supported"),
    ATTNCHECK_FLAG("window", "window", window, p.has_window(), "sliding window not supported"),
};
// The logit stage's rows go here (table()), one per entry, in the library's order.
const Feature kAfterLogit[] = {
    ATTNCHECK_FLAG("dropout", "dropout", dropout, p.dropout_p > 0, "dropout not supported"),
    ATTNCHECK_FLAG("finite-fill", "finite_fill", finite_fill, p.fill == MaskFill::finite,
                   "finite mask fill not supported"),
    {"fully-masked", "fully_masked", [](const P&) { return true; },
     [](const Capabilities& c, const P& p) {
       return c.fully_masked.count(p.fully_masked)
                  ? Support::yes()
                  : Support::no(std::string("fully-masked policy '") + to_string(p.fully_masked) + "' not supported");
     },
     nullptr, 0, nullptr},
    // Features after plugin ABI 2 travel in extensions. Before weights and lse: a harness that drops an
    // unsupported weights/lse output and retries must see these as the reason.
    ATTNCHECK_FLAG_EXT("sinks", "sinks", sinks, !p.sinks.empty(), "attention sinks not supported", ext_tag::sinks,
                       "attention sinks"),
    ATTNCHECK_FLAG_EXT("scores", "scores", scores_out, p.scores_out != ScoresOut::none,
                       "raw-score output not supported", ext_tag::scores, nullptr),
    ATTNCHECK_FLAG_EXT("kv_append", "kv_append", kv_append, p.past_len > 0,
                       "KV-cache append (past/present key and value) not supported", ext_tag::kv_append,
                       "KV-cache append"),
    ATTNCHECK_FLAG_EXT("varlen", "varlen", varlen, !p.cu_seqlens_q.empty(),
                       "variable-length packed sequences not supported", ext_tag::varlen, "packed sequences (varlen)"),
    ATTNCHECK_FLAG_EXT("paged_kv", "paged_kv", paged_kv, p.page_size > 0, "paged KV cache (block table) not supported",
                       ext_tag::paged_kv, "a paged KV cache"),
    ATTNCHECK_FLAG_EXT("fp8", "fp8", fp8, is_fp8(p.dtype), "fp8 inputs (e4m3/e5m2 with descale factors) not supported",
                       ext_tag::fp8, "fp8 inputs"),
    // Every library modification (mods.hpp) the problem uses must be among the backend's Capabilities::mods; a
    // plugin or worker that does not declare one (every one built before the library) is never offered it.
    {"modifications", "modifications", uses_modifications,
     [](const Capabilities& c, const P& p) {
       for (const ModEntry* m : used_modifications(p))
         if (!c.mods.count(m->name)) return Support::no(std::string("modification ") + m->name + " not supported");
       return Support::yes();
     },
     nullptr, 0, nullptr},
    // A quantized KV cache: plugin.h tag 14 (the codes and the scale tensors); the worker protocol's k_scale and
    // v_scale tensors.
    ATTNCHECK_FLAG_EXT("kv-quant", "kv_quant", kv_quant, p.kv_quantized(),
                       "quantized KV cache (k/v codes with scales) not supported", ext_tag::kv_quant,
                       "a quantized KV cache"),
    // Absorbed MLA: plugin.h tag 13 (v a view of k); a worker gets v as its own tensor, k's first Dv columns.
    // 4-bit codes (q4_0 / q4_1): no plugin extension tag and no k_min / v_min in the worker protocol, so plugins
    // and workers are never offered them.
    ATTNCHECK_FLAG_EXT("kv-q4", "kv_q4", kv_q4, p.kv_quantized() && is_q4(p.kv_dtype),
                       "4-bit KV cache codes (q4_0 / q4_1) not supported", 0, "a 4-bit KV cache"),
    // A paged quantized cache: per-token and per-block scales live in the pages beside their codes. Neither the
    // plugin ABI nor the worker protocol says so, so plugins and workers are never offered it.
    ATTNCHECK_FLAG_EXT("kv-quant-paged", "kv_quant_paged", kv_quant_paged, p.kv_quantized() && p.page_size > 0,
                       "paged quantized KV cache not supported", 0, "a paged quantized KV cache"),
    ATTNCHECK_FLAG_EXT("mla", "mla", mla, p.mla, "absorbed MLA (v the first Dv columns of k) not supported",
                       ext_tag::mla, nullptr),
    ATTNCHECK_FLAG_EXT("max-logit", "max_logit", max_logit_out, p.max_logit != MaxLogitOut::none,
                       "max-logit output not supported", ext_tag::max_logit, "the max-logit output"),
    // An fp8 output: no plugin extension tag and nothing in the worker protocol's outputs (amax_o), so plugins and
    // workers are never offered it.
    ATTNCHECK_FLAG_EXT("fp8-out", "fp8_out", fp8_out, p.fp8_out,
                       "fp8 output (O * scale_o as fp8 codes, amax_o) not supported", 0, "an fp8 output"),
    ATTNCHECK_FLAG("weights", "weights_out", weights_out, p.want_weights, "weights output not supported"),
    ATTNCHECK_FLAG("lse", "lse_out", lse_out, p.want_lse, "lse output not supported"),
};
#undef ATTNCHECK_FLAG
#undef ATTNCHECK_FLAG_EXT

const std::vector<Feature>& table() {
  static const std::vector<Feature> t = [] {
    std::vector<Feature> v(std::begin(kBeforeLogit), std::end(kBeforeLogit));
    for (const ModEntry& m : logit_modifications())
      v.push_back(Feature{m.name, m.name, nullptr, nullptr, nullptr, 0, nullptr, &m});
    v.insert(v.end(), std::begin(kAfterLogit), std::end(kAfterLogit));
    return v;
  }();
  return t;
}

}  // namespace

bool Feature::uses(const Problem& p) const { return logit ? logit->used(p) : used(p); }
Support Feature::allows(const Capabilities& c, const Problem& p) const {
  if (!logit) return check(c, p);
  return declared(c) ? Support::yes() : Support::no(std::string(logit->name) + " not supported");
}
bool Feature::declared(const Capabilities& c) const {
  if (!boolean()) throw std::logic_error(std::string(name) + ": not a yes/no capability");
  return logit ? c.logit.count(logit->name) > 0 : c.*flag;
}
void Feature::declare(Capabilities& c, bool on) const {
  if (!boolean()) throw std::logic_error(std::string(name) + ": not a yes/no capability");
  if (!logit)
    c.*flag = on;
  else if (on)
    c.logit.insert(logit->name);
  else
    c.logit.erase(logit->name);
}

std::span<const Feature> problem_features() { return table(); }

std::vector<std::string> extension_features(const Problem& p) {
  std::vector<std::string> out;
  for (const Feature& f : table())
    if (f.abi_tag && f.uses(p)) out.emplace_back(f.protocol);
  return out;
}

void declare_extension_features(Capabilities& c, const std::vector<std::string>& names) {
  for (const Feature& f : table())
    if (f.abi_tag && f.boolean()) f.declare(c, std::find(names.begin(), names.end(), f.protocol) != names.end());
  // fp8 is also a dtype: declaring the feature offers both formats (the plugin's supports() may decline one), and
  // a declaration without it offers neither, whatever a dtype list says.
  for (DType t : {DType::e4m3, DType::e5m2})
    if (c.fp8)
      c.dtypes.insert(t);
    else
      c.dtypes.erase(t);
  c.mods.clear();
  for (const ModEntry& m : modifications())
    if (std::find(names.begin(), names.end(), m.name) != names.end()) c.mods.insert(m.name);
}

Support backward_modelled(const Problem& p) {
  for (const Feature& f : table())
    if (f.backward_gap && f.uses(p))
      return Support::no(std::string("backward with ") + f.backward_gap + " not implemented");
  return Support::yes();
}

Support check_capabilities(const Capabilities& c, const Problem& p) {
  for (const Feature& f : table())
    if (f.uses(p))
      if (Support s = f.allows(c, p); !s.ok) return s;
  return Support::yes();
}

}  // namespace model
}  // namespace attncheck
