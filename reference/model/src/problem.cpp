// The Problem's derived quantities, tensor allocation for a problem, and the check that inputs match it.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attncheck/problem.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/mla.hpp"
#include "detail.hpp"

namespace attncheck {
inline namespace model {

using detail::fail;

// ---- problem -----------------------------------------------------------------------------------------------
double Problem::effective_scale() const { return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(Dqk)); }

int64_t Problem::key_length(int64_t b) const { return key_lengths.empty() ? Lk : key_lengths[static_cast<size_t>(b)]; }

int64_t Problem::diagonal_offset(int64_t b) const {
  switch (alignment) {
    case Alignment::top_left: return 0;
    case Alignment::bottom_right: return key_length(b) - Lq;
    case Alignment::explicit_: return causal_offsets.empty() ? causal_offset : causal_offsets[static_cast<size_t>(b)];
  }
  return 0;
}

int64_t Problem::sequence_of(int64_t i) const {
  // the last s with cu_seqlens_q[s] <= i, skipping empty sequences (their offset equals the next one's)
  const auto it = std::upper_bound(cu_seqlens_q.begin(), cu_seqlens_q.end(), i);
  return static_cast<int64_t>(it - cu_seqlens_q.begin()) - 1;
}

Problem::RowKeys Problem::row_keys(int64_t b, int64_t i) const {
  if (cu_seqlens_q.empty()) return {0, Lk, key_length(b), i + diagonal_offset(b)};
  const size_t s = static_cast<size_t>(sequence_of(i));
  const int64_t q0 = cu_seqlens_q[s], k0 = cu_seqlens_k[s], k1 = cu_seqlens_k[s + 1];
  const int64_t offset = alignment == Alignment::bottom_right ? (k1 - k0) - (cu_seqlens_q[s + 1] - q0)
                         : alignment == Alignment::explicit_  ? causal_offset
                                                              : 0;
  return {k0, k1, k1, k0 + (i - q0) + offset};
}

double Problem::sink(int64_t h) const {
  return sinks.empty() ? -std::numeric_limits<double>::infinity() : sinks[static_cast<size_t>(h)];
}

std::vector<int> storage_order(Layout l) {
  return l == Layout::BHSD ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 2, 1, 3};
}

std::vector<int64_t> qkv_shape(const Problem& p, int which) {
  const int64_t H = which == 0 ? p.Hq : p.Hkv;
  // 4-bit codes: bytes of two
  const int64_t D = (which == 2 ? p.Dv : p.Dqk) / (which != 0 && is_q4(kv_storage_dtype(p)) ? 2 : 1);
  if (which != 0 && p.page_size > 0) return {p.num_pages, H, p.page_size, D};
  return {p.B, H, which == 0 ? p.Lq : p.new_len(), D};
}

Tensor make_qkv(const Problem& p, int which) {
  return Tensor(which == 0 ? p.dtype : kv_storage_dtype(p), qkv_shape(p, which), storage_order(p.layout));
}

Attended gather_pages(const Problem& p, const Inputs& in) {
  Attended a{p, in};
  if (p.page_size == 0) return a;
  a.p.page_size = a.p.num_pages = 0;
  a.p.block_table.clear();
  const int64_t P = p.page_size, n = p.pages_per_seq();
  for (int which : {1, 2}) {
    const Tensor& pool = which == 1 ? in.k : in.v;
    Tensor flat = make_qkv(a.p, which);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j) {
          const int64_t page = p.block_table[static_cast<size_t>(b * n + j / P)];
          for (int64_t d = 0; d < flat.shape[3]; ++d) flat.put(b, h, j, d, pool.at(page, h, j % P, d));
        }
    (which == 1 ? a.in.k : a.in.v) = std::move(flat);
  }
  if (!kv_scales_in_pages(p)) return a;  // one scale per tensor (or none)
  // Per-token and per-block scales (and q4_1's mins) travel with their codes, out of the same page slot.
  for (std::optional<Tensor>* s : {&a.in.k_scale, &a.in.v_scale, &a.in.k_min, &a.in.v_min}) {
    if (!*s) continue;
    const Tensor& pool = **s;
    Tensor flat(pool.dtype, {p.B, p.Hkv, p.Lk, pool.shape[3]});
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j) {
          const int64_t page = p.block_table[static_cast<size_t>(b * n + j / P)];
          for (int64_t g = 0; g < flat.shape[3]; ++g) flat.put(b, h, j, g, pool.at(page, h, j % P, g));
        }
    *s = std::move(flat);
  }
  return a;
}

Attended dequantize(const Problem& p, const Inputs& in, DType to) {
  Attended a{p, in};
  if (!is_fp8(p.dtype)) return a;
  a.p.dtype = to;
  a.p.descale_q = a.p.descale_k = a.p.descale_v = 1.0;
  const double qk = round_to(to, p.descale_q * p.descale_k);
  a.p.scale = round_to(to, round_to(to, p.effective_scale()) * qk);
  // Every stored element converted in place, the strides kept: the same layout, also a view with gaps (whose
  // storage holds more than numel elements).
  auto convert = [&](const Tensor& t, double factor) {
    const auto held = static_cast<int64_t>(t.bytes.size() / dtype_size(t.dtype));
    Tensor c(to, {held});
    c.shape = t.shape, c.strides = t.strides;
    for (int64_t n = 0; n < held; ++n) c.set_offset(n, factor == 1.0 ? t.get_offset(n) : factor * t.get_offset(n));
    return c;
  };
  a.in.q = convert(in.q, 1.0), a.in.k = convert(in.k, 1.0), a.in.v = convert(in.v, p.descale_v);
  if (in.past_k) a.in.past_k = convert(*in.past_k, 1.0);
  if (in.past_v) a.in.past_v = convert(*in.past_v, p.descale_v);
  return a;
}

Tensor make_kv(const Problem& p, int which, int64_t L) {
  return Tensor(kv_storage_dtype(p), {p.B, p.Hkv, L, which == 2 ? p.Dv : p.Dqk}, storage_order(p.layout));
}

// present[b,h,j] = j < P ? past[b,h,j] : new[b,h,j-P], element by element (values are copied, never rounded).
Attended attend_over_present(const Problem& p, const Inputs& in) {
  Attended a{p, in};
  a.p.past_len = 0;
  if (p.past_len == 0) return a;
  const int64_t P = p.past_len;
  for (int which : {1, 2}) {
    const Tensor& past = which == 1 ? *in.past_k : *in.past_v;
    const Tensor& now = which == 1 ? in.k : in.v;
    Tensor& present = which == 1 ? a.in.k : a.in.v;
    present = make_kv(p, which, p.Lk);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t d = 0; d < present.shape[3]; ++d)
            present.put(b, h, j, d, j < P ? past.at(b, h, j, d) : now.at(b, h, j - P, d));
  }
  a.in.past_k.reset();
  a.in.past_v.reset();
  return a;
}

Attended sequence_problem(const Problem& p, const Inputs& in, int64_t s) {
  const size_t u = static_cast<size_t>(s);
  const int64_t q0 = p.cu_seqlens_q[u], k0 = p.cu_seqlens_k[u];
  Attended a{p, {}};
  a.p.cu_seqlens_q.clear(), a.p.cu_seqlens_k.clear();
  a.p.Lq = p.cu_seqlens_q[u + 1] - q0, a.p.Lk = p.cu_seqlens_k[u + 1] - k0;
  // Rows [r0, r0 + n) of dim 2 and [c0, c0 + m) of dim 3 of a [B,H,L,*] tensor; a broadcast dim (extent 1) stays.
  auto block = [](const Tensor& t, int64_t r0, int64_t c0, bool cols, Tensor out) {
    for (int64_t b = 0; b < out.shape[0]; ++b)
      for (int64_t h = 0; h < out.shape[1]; ++h)
        for (int64_t i = 0; i < out.shape[2]; ++i)
          for (int64_t j = 0; j < out.shape[3]; ++j)
            out.put(b, h, i, j, t.at(b, h, t.shape[2] == 1 ? 0 : r0 + i, cols && t.shape[3] != 1 ? c0 + j : j));
    return out;
  };
  const Problem& q = a.p;
  a.in.q = block(in.q, q0, 0, false, make_qkv(q, 0));
  a.in.k = block(in.k, k0, 0, false, make_qkv(q, 1));
  a.in.v = block(in.v, k0, 0, false, make_qkv(q, 2));
  auto sliced = [&](const std::optional<Tensor>& t,
                    std::optional<std::array<int64_t, 4>>& shape) -> std::optional<Tensor> {
    if (!t) return std::nullopt;
    const auto& e = t->shape;
    const std::array<int64_t, 4> sub{e[0], e[1], e[2] == 1 ? 1 : q.Lq, e[3] == 1 ? 1 : q.Lk};
    shape = sub;
    return block(*t, q0, k0, true, Tensor(t->dtype, {sub[0], sub[1], sub[2], sub[3]}));
  };
  a.in.mask = sliced(in.mask, a.p.mask_shape);
  a.in.bias = sliced(in.bias, a.p.bias_shape);
  std::optional<std::array<int64_t, 4>> keep_shape;
  a.in.keep = sliced(in.keep, keep_shape);
  // The position stage's per-sequence parameters (rope.hpp): the sequence's offset and its block of mRoPE ids.
  if (!p.rope_offsets.empty()) a.p.rope_offsets = {p.rope_offsets[u]};
  if (!p.rope_position_ids.empty()) {
    a.p.rope_position_ids.clear();
    for (size_t sec = 0; sec < p.rope_mrope_section.size(); ++sec)
      for (int64_t j = 0; j < q.Lk; ++j)
        a.p.rope_position_ids.push_back(p.rope_position_ids[sec * size_t(p.Lk) + size_t(k0 + j)]);
  }
  return a;
}

void split_past(const Problem& p, Inputs& in) {
  if (p.past_len == 0) return;
  const int64_t P = p.past_len;
  for (int which : {1, 2}) {
    Tensor& full = which == 1 ? in.k : in.v;
    Tensor past = make_kv(p, which, P), now = make_qkv(p, which);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t d = 0; d < full.shape[3]; ++d)
            (j < P ? past : now).put(b, h, j < P ? j : j - P, d, full.at(b, h, j, d));
    full = std::move(now);
    (which == 1 ? in.past_k : in.past_v) = std::move(past);
  }
}

Outputs make_outputs(const Problem& p) {
  Outputs o;
  o.out = Tensor(p.out_dtype(), {p.B, p.Hq, p.Lq, p.Dv}, storage_order(p.layout));
  if (p.want_lse) o.lse = Tensor(p.stat_dtype(), {p.B, p.Hq, p.Lq});
  if (p.want_weights) o.weights = Tensor(p.stat_dtype(), {p.B, p.Hq, p.Lq, p.Lk});
  if (p.scores_out != ScoresOut::none) o.scores = Tensor(p.stat_dtype(), {p.B, p.Hq, p.Lq, p.Lk});
  if (p.past_len > 0) o.present_k = make_kv(p, 1, p.Lk), o.present_v = make_kv(p, 2, p.Lk);
  if (p.max_logit != MaxLogitOut::none) o.max_logit = Tensor(p.stat_dtype(), max_logit_shape(p));
  if (p.fp8_out) o.amax_o = Tensor(p.stat_dtype(), {1});
  return o;
}

std::vector<int64_t> max_logit_shape(const Problem& p) {
  if (p.max_logit == MaxLogitOut::none) return {};
  if (p.max_logit == MaxLogitOut::heads) return {p.Hq};
  return {p.B, p.Hq, p.Lq};
}

std::vector<double> max_logit_heads(const Problem& p, const std::vector<double>& rows) {
  std::vector<double> heads(static_cast<size_t>(p.Hq), -std::numeric_limits<double>::infinity());
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        const double x = rows[static_cast<size_t>((b * p.Hq + h) * p.Lq + i)];
        double& m = heads[static_cast<size_t>(h)];
        m = std::isnan(x) || std::isnan(m) ? std::numeric_limits<double>::quiet_NaN() : std::max(m, x);  // NaN wins
      }
  return heads;
}

void validate(const Problem& p, const Inputs& in) {
  validate(p);
  auto check = [&](const char* field, const Tensor& t, DType dt, const std::vector<int64_t>& shape) {
    if (t.dtype != dt) fail(std::string(field) + " dtype must be " + to_string(dt) + ", got " + to_string(t.dtype));
    if (t.shape != shape)
      fail(std::string(field) + " shape must be " + shape_string(shape) + ", got " + shape_string(t.shape));
    // Dense storage, or a view with gaps (q, k and v as slices of one packed QKV buffer): whole elements either way.
    const size_t es = dtype_size(t.dtype);
    const auto held = static_cast<int64_t>(t.bytes.size() / es);
    if (t.bytes.size() % es != 0 || held < t.numel())
      fail(std::string(field) + " holds " + std::to_string(t.bytes.size()) + " bytes, expected " +
           std::to_string(t.numel() * static_cast<int64_t>(es)) +
           " (or more, a whole number of elements, for strides with gaps)");
    // Every element must lie inside the bytes: a hand-built tensor with wrong strides would read out of bounds.
    if (t.strides.size() != t.shape.size())
      fail(std::string(field) + " strides " + shape_string(t.strides) + " must have one entry per dim of shape " +
           shape_string(t.shape));
    int64_t last = 0;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.strides[d] < 0)
        fail(std::string(field) + " strides " + shape_string(t.strides) + " must be >= 0, dim " + std::to_string(d) +
             " is " + std::to_string(t.strides[d]));
      if (t.shape[d] > 0) last += (t.shape[d] - 1) * t.strides[d];
    }
    if (t.numel() > 0 && last >= held)
      fail(std::string(field) + " strides " + shape_string(t.strides) + " reach element " + std::to_string(last) +
           " of shape " + shape_string(t.shape) + ", which holds only " + std::to_string(held));
  };
  check("q", in.q, p.dtype, {p.B, p.Hq, p.Lq, p.Dqk});
  check("k", in.k, kv_storage_dtype(p), qkv_shape(p, 1));
  check("v", in.v, kv_storage_dtype(p), qkv_shape(p, 2));
  check_latent_values(p, in);
  if (p.kv_quantized() != in.k_scale.has_value() || in.k_scale.has_value() != in.v_scale.has_value())
    fail(std::string("k_scale/v_scale: kv_scales=") + to_string(p.kv_scales) + " but the inputs " +
         (in.k_scale ? "have k_scale" : "have no k_scale") + " and " + (in.v_scale ? "v_scale" : "no v_scale"));
  if (in.k_scale) {
    check("k_scale", *in.k_scale, p.kv_scale_dtype, kv_scale_shape(p, 1));
    check("v_scale", *in.v_scale, p.kv_scale_dtype, kv_scale_shape(p, 2));
  }
  const bool mins = p.kv_quantized() && p.kv_dtype == DType::q4_1;
  if (mins != in.k_min.has_value() || mins != in.v_min.has_value())
    fail(std::string("k_min/v_min: kv_dtype=") + to_string(p.kv_dtype) + (mins ? " needs" : " takes no") +
         " k_min and v_min, but the inputs " + (in.k_min ? "have k_min" : "have no k_min") + " and " +
         (in.v_min ? "v_min" : "no v_min"));
  if (mins) {
    check("k_min", *in.k_min, p.kv_scale_dtype, kv_scale_shape(p, 1));
    check("v_min", *in.v_min, p.kv_scale_dtype, kv_scale_shape(p, 2));
  }
  if (in.k_scale) validate_kv_scales(p, in);
  if ((p.past_len > 0) != in.past_k.has_value() || in.past_k.has_value() != in.past_v.has_value())
    fail("past_k/past_v: past_len=" + std::to_string(p.past_len) + " but the inputs " +
         (in.past_k ? "have past_k" : "have no past_k") + " and " + (in.past_v ? "past_v" : "no past_v"));
  if (in.past_k) {
    check("past_k", *in.past_k, p.dtype, {p.B, p.Hkv, p.past_len, p.Dqk});
    check("past_v", *in.past_v, p.dtype, {p.B, p.Hkv, p.past_len, p.Dv});
  }
  if (p.mask_shape.has_value() != in.mask.has_value())
    fail(std::string("mask: problem ") + (p.mask_shape ? "declares" : "does not declare") +
         " a boolean mask but the inputs " + (in.mask ? "have one" : "have none"));
  if (in.mask) {
    const auto& s = *p.mask_shape;
    check("mask", *in.mask, DType::u8, {s[0], s[1], s[2], s[3]});
  }
  if (p.bias_shape.has_value() != in.bias.has_value())
    fail(std::string("bias: problem ") + (p.bias_shape ? "declares" : "does not declare") + " a bias but the inputs " +
         (in.bias ? "have one" : "have none"));
  if (in.bias) {
    const auto& s = *p.bias_shape;
    check("bias", *in.bias, p.bias_dtype, {s[0], s[1], s[2], s[3]});
  }
  if ((p.dropout_p > 0) != in.keep.has_value())
    fail("keep: dropout_p=" + std::to_string(p.dropout_p) + " but the inputs " +
         (in.keep ? "have a keep-mask" : "have no keep-mask"));
  if (in.keep) check("keep", *in.keep, DType::u8, {p.B, p.Hq, p.Lq, p.Lk});
}

}  // namespace model
}  // namespace attncheck
