// The checks of invariance.hpp: bitwise comparison of runs, the other-values interloper case, the batch forms (a
// case's entry alone, or moved to the end of a larger batch after another sequence, its keys padded to a longer
// neighbour's length where padding cannot change its result), the schedule settings and the layout forms.
#include "invariance.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "attncheck/declarations.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/mla.hpp"
#include "attncheck/schedule.hpp"

namespace attncheck::invariance {

namespace {
bool g_asked = false;
}  // namespace

void set_asked(bool on) { g_asked = on; }
bool asked() { return g_asked; }

const char* tag(Kind k) {
  switch (k) {
    case Kind::rerun: return "nondeterministic";
    case Kind::batch: return "batch-variant";
    case Kind::schedule: return "schedule-variant";
    case Kind::layout: return "layout-variant";
  }
  return "?";
}

const char* name(Kind k) {
  switch (k) {
    case Kind::rerun: return "rerun";
    case Kind::batch: return "batch";
    case Kind::schedule: return "schedule";
    case Kind::layout: return "layout";
  }
  return "?";
}

int64_t Check::elements() const {
  int64_t n = 0;
  for (const auto& d : diffs) n += d.elements;
  return n;
}

int64_t Check::moved() const {
  int64_t n = 0;
  for (const auto& d : diffs) n += d.moved;
  return n;
}

namespace {

constexpr int64_t kAll = std::numeric_limits<int64_t>::max();

uint64_t raw_bits(const Tensor& t, int64_t off) {
  uint64_t x = 0;
  const size_t n = dtype_size(t.dtype);
  std::memcpy(&x, t.bytes.data() + static_cast<size_t>(off) * n, n);
  return x;
}

std::string number(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

std::string element_text(const Tensor& t, int64_t off, uint64_t bits) {
  char hex[24];
  std::snprintf(hex, sizeof hex, "0x%0*llx", static_cast<int>(2 * dtype_size(t.dtype)),
                static_cast<unsigned long long>(bits));
  return number(t.get_offset(off)) + " (" + hex + ")";
}

// Compares element ia of a with element ib of b into d.
void diff_element(TensorDiff& d, const Tensor& a, const std::vector<int64_t>& ia, const Tensor& b,
                  const std::vector<int64_t>& ib) {
  const int64_t oa = a.offset(ia.data()), ob = b.offset(ib.data());
  ++d.elements;
  const uint64_t xa = raw_bits(a, oa), xb = raw_bits(b, ob);
  if (xa == xb) return;
  const double va = a.get_offset(oa), vb = b.get_offset(ob);
  if (std::isnan(va) && std::isnan(vb)) return;
  ++d.moved;
  d.bits += std::popcount(xa ^ xb);
  if (std::isfinite(va) && std::isfinite(vb)) d.max_abs = std::max(d.max_abs, std::abs(va - vb));
  if (d.first.empty())
    d.first = d.tensor + shape_string(ia) + " " + element_text(a, oa, xa) + " vs " + element_text(b, ob, xb);
}

// Compares a[ba, ...] with b[bb, ...] over a's dims after the first, the last dim only below `limit`, into d.
void diff_block(TensorDiff& d, const Tensor& a, int64_t ba, const Tensor& b, int64_t bb, int64_t limit) {
  const size_t r = a.shape.size();
  std::vector<int64_t> ext = a.shape;
  ext[0] = 1;
  ext[r - 1] = std::min(ext[r - 1], limit);
  for (int64_t e : ext)
    if (e <= 0) return;
  std::vector<int64_t> i(r, 0), ia(r), ib(r);
  for (;;) {
    ia = i, ib = i;
    ia[0] = ba, ib[0] = bb;
    diff_element(d, a, ia, b, ib);
    size_t k = r;
    while (k > 0 && ++i[k - 1] == ext[k - 1]) i[--k] = 0;
    if (k == 0) return;
  }
}

TensorDiff diff_whole(const std::string& name, const Tensor& a, const Tensor& b) {
  TensorDiff d;
  d.tensor = name;
  if (a.shape != b.shape || a.dtype != b.dtype)
    throw std::logic_error(name + ": the two runs' tensors differ in shape or dtype");
  for (int64_t n = 0; n < a.shape[0]; ++n) diff_block(d, a, n, b, n, kAll);
  return d;
}

std::string summary(const std::vector<TensorDiff>& ds) {
  std::string s;
  for (const auto& d : ds) {
    if (!s.empty()) s += ", ";
    s += d.tensor + " " + std::to_string(d.moved) + " of " + std::to_string(d.elements);
    if (d.moved) s += " (" + std::to_string(d.bits) + " bits, max |diff| " + number(d.max_abs) + ")";
  }
  return s;
}

std::string first_moved(const std::vector<TensorDiff>& ds) {
  for (const auto& d : ds)
    if (d.moved) return d.first;
  return "";
}

// The same tensor with its storage rotated by `by` elements: other values of the same distribution and dtype.
Tensor rotated(const Tensor& t, int64_t by) {
  Tensor r = t;
  const size_t n = dtype_size(t.dtype), count = r.bytes.size() / n;
  if (count > 1)
    std::rotate(r.bytes.begin(), r.bytes.begin() + static_cast<std::ptrdiff_t>(by % count * n), r.bytes.end());
  return r;
}

// The same problem with other q, k, v values: the case run in between, and the source of filler sequences. With
// absorbed MLA v stays k's first columns (mla.hpp).
Inputs other_values(const Problem& p, const Inputs& in) {
  Inputs o = in;
  o.q = rotated(in.q, 7), o.k = rotated(in.k, 13), o.v = rotated(in.v, 11);
  if (in.past_k) o.past_k = rotated(*in.past_k, 5), o.past_v = rotated(*in.past_v, 3);
  if (p.mla) tie_latent_values(p, o);
  return o;
}

// dst[db, ...] = src[sb, ...] over dst's dims after the first. Along `kdim` an index past src's size is padding:
// `pad` when given, else src's value at the index modulo its size (values of the same sequence).
void put_entry(Tensor& dst, int64_t db, const Tensor& src, int64_t sb, int kdim, std::optional<double> pad) {
  const size_t r = dst.shape.size();
  std::vector<int64_t> ext = dst.shape;
  ext[0] = 1;
  for (int64_t e : ext)
    if (e <= 0) return;
  std::vector<int64_t> i(r, 0), id(r), is(r);
  for (;;) {
    id = i, is = i;
    id[0] = db, is[0] = sb;
    bool padding = false;
    if (kdim >= 0 && is[static_cast<size_t>(kdim)] >= src.shape[static_cast<size_t>(kdim)]) {
      padding = pad.has_value();
      is[static_cast<size_t>(kdim)] %= src.shape[static_cast<size_t>(kdim)];
    }
    dst.set(id.data(), padding ? *pad : src.get(is.data()));
    size_t k = r;
    while (k > 0 && ++i[k - 1] == ext[k - 1]) i[--k] = 0;
    if (k == 0) return;
  }
}

// One sequence of a batch form: entry b of the case, with the case's inputs or other values (a filler).
struct Entry {
  const Inputs* in;
  int64_t b;
  int64_t key_length;  // its valid keys in the batch form (-1: no key lengths in the batch form)
};

struct Form {
  Problem p;
  Inputs in;
  std::string what;                                  // "alone (batch of 1)", ...
  std::vector<std::pair<int64_t, int64_t>> targets;  // (entry of the case, its position here)
  // A varlen form: the row here of each query row and key of the case (targets unused).
  std::vector<int64_t> qmap, kmap;
};

// Mask, bias or keep-mask of the batch form: per entry when the case's has a batch dim (size B > 1; the keep-mask
// always has one), else shared;
// a key dim of size Lk grows to lk with `pad` in the new slots.
std::optional<Tensor> gather_mask(const Problem& p, const std::optional<Tensor>& t, const std::vector<Entry>& es,
                                  int64_t lk, double pad, std::optional<std::array<int64_t, 4>>* shape,
                                  bool always_per_entry = false) {
  if (!t) return std::nullopt;
  std::vector<int64_t> s = t->shape;
  const bool per_entry = always_per_entry || (p.B > 1 && s[0] == p.B);
  s[0] = per_entry ? static_cast<int64_t>(es.size()) : 1;
  const bool keyed = s[3] == p.Lk && p.Lk > 1;
  if (keyed) s[3] = lk;
  Tensor out(t->dtype, s);
  for (size_t e = 0; e < (per_entry ? es.size() : 1); ++e)
    put_entry(out, static_cast<int64_t>(e), *t, per_entry ? es[e].b : 0, keyed ? 3 : -1, pad);
  if (shape) *shape = std::array<int64_t, 4>{s[0], s[1], s[2], s[3]};
  return out;
}

// Element (its index) of `src` copied bit for bit into element `at` of `dst`.
void copy_element(Tensor& dst, const int64_t* at, const Tensor& src, const int64_t* from) {
  const size_t n = dtype_size(src.dtype);
  std::memcpy(dst.bytes.data() + static_cast<size_t>(dst.offset(at)) * n,
              src.bytes.data() + static_cast<size_t>(src.offset(from)) * n, n);
}

// Page `sp` of a pool (logical [pages, Hkv, page_size, D]) copied bit for bit into page `dp` of another.
void copy_page(Tensor& dst, int64_t dp, const Tensor& src, int64_t sp) {
  for (int64_t h = 0; h < src.shape[1]; ++h)
    for (int64_t t = 0; t < src.shape[2]; ++t)
      for (int64_t d = 0; d < src.shape[3]; ++d) {
        const int64_t at[4] = {dp, h, t, d}, from[4] = {sp, h, t, d};
        copy_element(dst, at, src, from);
      }
}

// The pool and block table of a paged batch form (f.p has its B and Lk): the case's entries keep their pages and
// block-table rows; a filler (an entry from other inputs) gets pages of its own after them, holding its sequence's
// pages from those inputs; when the form's keys are longer than the case's, each of the case's rows names the
// filler's pages in its new slots (a neighbour's values past its key length, which no row may read).
void paged_pool(const Problem& p, const Inputs& in, const std::vector<Entry>& es, Form& f) {
  Problem& q = f.p;
  const int64_t row = p.pages_per_seq(), row2 = q.pages_per_seq();
  int64_t pages = p.num_pages;
  std::vector<int64_t> own(es.size(), -1);
  for (size_t e = 0; e < es.size(); ++e)
    if (es[e].in != &in) own[e] = pages, pages += row2;
  q.num_pages = pages;
  q.block_table.clear();
  const auto filler = std::find_if(own.begin(), own.end(), [](int64_t x) { return x >= 0; });
  for (size_t e = 0; e < es.size(); ++e)
    for (int64_t r = 0; r < row2; ++r)
      q.block_table.push_back(own[e] >= 0 ? own[e] + r
                              : r < row || filler == own.end()
                                  ? p.block_table[static_cast<size_t>(es[e].b * row + r % row)]
                                  : *filler + r);
  // The pages of q's pool: the case's own, then each filler entry's sequence, as q's block table names them.
  const auto pool = [&](Tensor t, auto&& of) {  // of(inputs): the pooled tensor of those inputs
    for (int64_t pg = 0; pg < p.num_pages; ++pg) copy_page(t, pg, of(in), pg);
    for (size_t e = 0; e < es.size(); ++e)
      if (own[e] >= 0)
        for (int64_t r = 0; r < row2; ++r)
          copy_page(t, own[e] + r, of(*es[e].in), p.block_table[static_cast<size_t>(es[e].b * row + r % row)]);
    return t;
  };
  // A quantized cache's per-token and per-block scales (and q4_1's mins) sit in the pages beside their codes.
  if (pages == p.num_pages) {
    f.in.k = in.k, f.in.v = in.v;
    if (kv_scales_in_pages(p))
      f.in.k_scale = in.k_scale, f.in.v_scale = in.v_scale, f.in.k_min = in.k_min, f.in.v_min = in.v_min;
    return;
  }
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  const bool int_codes = p.kv_quantized() && (p.kv_dtype == DType::i8 || is_q4(p.kv_dtype));  // hold no NaN
  for (int which : {1, 2}) {
    Tensor t = make_qkv(q, which);
    t.fill(int_codes ? 0.0 : nan);
    (which == 1 ? f.in.k : f.in.v) =
        pool(std::move(t), [which](const Inputs& x) -> const Tensor& { return which == 1 ? x.k : x.v; });
  }
  if (!kv_scales_in_pages(p)) return;
  for (auto [m, which] :
       {std::pair{&Inputs::k_scale, 1}, {&Inputs::v_scale, 2}, {&Inputs::k_min, 1}, {&Inputs::v_min, 2}}) {
    if (!(in.*m)) continue;
    Tensor t = make_kv_scale(q, which);
    t.fill(nan);
    f.in.*m = pool(std::move(t), [m](const Inputs& x) -> const Tensor& { return *(x.*m); });
  }
}

Form gather(const Problem& p, const Inputs& in, const std::vector<Entry>& es, int64_t lk) {
  Form f;
  Problem& q = f.p;
  q = p;
  q.B = static_cast<int64_t>(es.size());
  q.Lk = lk;
  q.key_lengths.clear();
  if (es.front().key_length >= 0)
    for (const Entry& e : es) q.key_lengths.push_back(e.key_length);
  // Per-entry fields follow their entries.
  auto per_entry = [&](std::vector<int64_t>& v) {
    if (v.empty() || static_cast<int64_t>(v.size()) != p.B) return;
    const std::vector<int64_t> all = v;
    v.clear();
    for (const Entry& e : es) v.push_back(all[static_cast<size_t>(e.b)]);
  };
  per_entry(q.causal_offsets), per_entry(q.rope_offsets), per_entry(q.prefix_lengths);
  // [B, n] rows follow their entries; a keyed row (doc ids, n = Lk) grows to lk with its own ids again (padded keys
  // are invisible by their key length).
  auto rows = [&](std::vector<int64_t>& v, int64_t n, int64_t to) {
    if (static_cast<int64_t>(v.size()) != p.B * n || n == 0) return;
    const std::vector<int64_t> all = v;
    v.clear();
    for (const Entry& e : es)
      for (int64_t j = 0; j < to; ++j) v.push_back(all[static_cast<size_t>(e.b * n + j % n)]);
  };
  rows(q.doc_ids, p.Lk, lk), rows(q.topk_indices, p.Lq * p.topk, p.Lq * p.topk);
  if (static_cast<int64_t>(p.alibi_slopes.size()) == p.B * p.Hq && p.B > 1) {  // [B, Hq] slopes
    q.alibi_slopes.clear();
    for (const Entry& e : es)
      q.alibi_slopes.insert(q.alibi_slopes.end(), p.alibi_slopes.begin() + e.b * p.Hq,
                            p.alibi_slopes.begin() + (e.b + 1) * p.Hq);
  }
  Inputs& x = f.in;
  x.q = make_qkv(q, 0), x.k = make_qkv(q, 1), x.v = make_qkv(q, 2);
  for (size_t e = 0; e < es.size(); ++e) {
    const auto n = static_cast<int64_t>(e);
    put_entry(x.q, n, es[e].in->q, es[e].b, -1, std::nullopt);
    if (p.page_size > 0) continue;  // the page pool is shared: the entries keep their block-table rows
    put_entry(x.k, n, es[e].in->k, es[e].b, 2, std::nullopt);
    put_entry(x.v, n, es[e].in->v, es[e].b, 2, std::nullopt);
  }
  if (p.page_size > 0) paged_pool(p, in, es, f);
  // Per-entry scales (and q4_1's mins) follow their entries (a per-token or per-block one its keys too).
  auto follow = [&](std::optional<Tensor> Inputs::*member, int which) {
    if (!(in.*member) || kv_scales_in_pages(p)) return;  // paged_pool moved them with their pages
    Tensor t = make_kv_scale(q, which);
    if (p.kv_scales ==
        KvScales::tensor)  // by granularity: a per-token scale of a one-batch case has shape [1, ...] too
      t = *(in.*member);   // one scale for the whole tensor
    else
      for (size_t e = 0; e < es.size(); ++e)
        put_entry(t, static_cast<int64_t>(e), *(es[e].in->*member), es[e].b, 2, std::nullopt);
    x.*member = std::move(t);
  };
  follow(&Inputs::k_scale, 1), follow(&Inputs::v_scale, 2), follow(&Inputs::k_min, 1), follow(&Inputs::v_min, 2);
  if (p.past_len > 0) {
    x.past_k = make_kv(q, 1, p.past_len), x.past_v = make_kv(q, 2, p.past_len);
    for (size_t e = 0; e < es.size(); ++e) {
      put_entry(*x.past_k, static_cast<int64_t>(e), *es[e].in->past_k, es[e].b, -1, std::nullopt);
      put_entry(*x.past_v, static_cast<int64_t>(e), *es[e].in->past_v, es[e].b, -1, std::nullopt);
    }
  }
  x.mask = gather_mask(p, in.mask, es, lk, 1.0, &q.mask_shape);
  x.bias = gather_mask(p, in.bias, es, lk, 0.0, &q.bias_shape);
  std::optional<std::array<int64_t, 4>> keep_shape;
  // Padded keys dropped: a fully masked row under the nan policy has NaN weights on every key, and only the
  // dropped ones stay out of its output.
  x.keep = gather_mask(p, in.keep, es, lk, 0.0, &keep_shape, true);
  validate(q, x);
  return f;
}

// Whether keys can be appended as padding without changing any row of the case: they are invisible under key
// padding, and only a finite fill, the uniform policy (whose rows average over every key), raw scores or a KV-cache
// past would see them. (A paged case's padded keys are a page more per sequence.)
bool can_pad(const Impl& impl, const Problem& p) {
  return impl.capabilities().key_padding && p.fill == MaskFill::neg_inf && p.fully_masked != FullyMasked::uniform &&
         p.scores_out == ScoresOut::none && p.past_len == 0 && p.Lk > 1;
}

// The paged forms: the pages at other places of the pool (stored in reverse order after one unused NaN page, the
// block table following them); for B > 1 also entry 0 alone and the entries in reverse order, on the same pool.
std::vector<Form> paged_forms(const Problem& p, const Inputs& in, const Inputs& filler, bool pad) {
  std::vector<Form> forms;
  Form f;
  f.p = p, f.in = in;
  const int64_t P = p.num_pages;
  f.p.num_pages = P + 1;
  for (int64_t& e : f.p.block_table) e = P - e;  // page e at slot P - e; slot 0 is the unused page
  f.in.k = make_qkv(f.p, 1), f.in.v = make_qkv(f.p, 2);
  // Per-token and per-block scales (and q4_1's mins) move with their pages; integer codes hold no NaN (code 0).
  std::vector<std::pair<Tensor*, const Tensor*>> pooled = {{&f.in.k, &in.k}, {&f.in.v, &in.v}};
  if (kv_scales_in_pages(p))
    for (auto [m, which] :
         {std::pair{&Inputs::k_scale, 1}, {&Inputs::v_scale, 2}, {&Inputs::k_min, 1}, {&Inputs::v_min, 2}})
      if (in.*m) pooled.emplace_back(&*(f.in.*m = make_kv_scale(f.p, which)), &*(in.*m));
  const bool int_codes = p.kv_quantized() && (p.kv_dtype == DType::i8 || is_q4(p.kv_dtype));
  for (auto [t, from] : pooled) {
    const Tensor& src = *from;
    t->fill(int_codes && (t == &f.in.k || t == &f.in.v) ? 0.0 : std::numeric_limits<double>::quiet_NaN());
    std::vector<int64_t> i(4, 0);
    for (i[0] = 0; i[0] < P; ++i[0])
      for (i[1] = 0; i[1] < src.shape[1]; ++i[1])
        for (i[2] = 0; i[2] < src.shape[2]; ++i[2])
          for (i[3] = 0; i[3] < src.shape[3]; ++i[3]) {
            const int64_t at[4] = {P - i[0], i[1], i[2], i[3]};
            copy_element(*t, at, src, i.data());
          }
  }
  validate(f.p, f.in);
  f.what = "with its pages elsewhere in a pool of " + std::to_string(P + 1) + " (reversed, after an unused page)";
  for (int64_t b = 0; b < p.B; ++b) f.targets.push_back({b, b});
  forms.push_back(std::move(f));
  if (p.B > 1) try {
      auto own = [&](int64_t b) { return p.key_length(b); };
      Form a = gather(p, in, {{&in, 0, own(0)}}, p.Lk);
      a.what = "alone (a batch of 1, the same pages)";
      a.targets = {{0, 0}};
      std::vector<Entry> es;
      for (int64_t b = p.B - 1; b >= 0; --b) es.push_back({&in, b, own(b)});
      Form r = gather(p, in, es, p.Lk);
      r.what = "in reverse batch order (the same pages)";
      for (int64_t b = 0; b < p.B; ++b) r.targets.push_back({b, p.B - 1 - b});
      forms.push_back(std::move(a));
      forms.push_back(std::move(r));
    } catch (const std::invalid_argument& e) {
      forms.front().what += " (other batches not built: " + std::string(e.what()) + ")";
    }
  try {
    const int64_t lk = pad ? p.Lk + p.page_size : p.Lk;
    std::vector<Entry> es = {{&filler, 0, lk}};
    for (int64_t b = 0; b < p.B; ++b) es.push_back({&in, b, p.key_length(b)});
    Form g = gather(p, in, es, lk);
    g.what = "in a batch of " + std::to_string(p.B + 1) + " after another sequence with pages of its own" +
             (pad ? ", keys padded from " + std::to_string(p.Lk) + " to the filler's " + std::to_string(lk) +
                        " (the case's new block-table slots name the filler's pages)"
                  : "");
    for (int64_t b = 0; b < p.B; ++b) g.targets.push_back({b, b + 1});
    forms.push_back(std::move(g));
  } catch (const std::invalid_argument& e) {
    if (pad) throw;  // tried again without padding
    forms.front().what += " (no filler sequence: " + std::string(e.what()) + ")";
  }
  return forms;
}

// A varlen form: the case's sequences `order` (-1: a filler sequence shaped like sequence 0, from `filler`) packed in
// that order; qmap/kmap give each row and key of the case its place here.
Form repacked(const Problem& p, const Inputs& in, const Inputs& filler, const std::vector<int64_t>& order) {
  Form f;
  Problem& q = f.p;
  q = p;
  q.cu_seqlens_q = {0}, q.cu_seqlens_k = {0};
  for (int64_t s : order) {
    const auto u = static_cast<size_t>(s < 0 ? 0 : s);
    q.cu_seqlens_q.push_back(q.cu_seqlens_q.back() + p.cu_seqlens_q[u + 1] - p.cu_seqlens_q[u]);
    q.cu_seqlens_k.push_back(q.cu_seqlens_k.back() + p.cu_seqlens_k[u + 1] - p.cu_seqlens_k[u]);
  }
  q.Lq = q.cu_seqlens_q.back(), q.Lk = q.cu_seqlens_k.back();
  Inputs& x = f.in;
  x.q = make_qkv(q, 0), x.k = make_qkv(q, 1), x.v = make_qkv(q, 2);
  f.qmap.assign(static_cast<size_t>(p.Lq), -1), f.kmap.assign(static_cast<size_t>(p.Lk), -1);
  // Rows [a, a + n) along dim 2 of every head of src into rows [to, to + n) of dst.
  auto rows = [](Tensor& dst, int64_t to, const Tensor& src, int64_t a, int64_t n) {
    for (int64_t h = 0; h < src.shape[1]; ++h)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t d = 0; d < src.shape[3]; ++d) {
          const int64_t at[4] = {0, h, to + r, d}, from[4] = {0, h, a + r, d};
          copy_element(dst, at, src, from);
        }
  };
  for (size_t k = 0; k < order.size(); ++k) {
    const int64_t s = order[k] < 0 ? 0 : order[k];
    const Inputs& src = order[k] < 0 ? filler : in;
    const int64_t qa = p.cu_seqlens_q[static_cast<size_t>(s)], nq = p.cu_seqlens_q[static_cast<size_t>(s) + 1] - qa;
    const int64_t ka = p.cu_seqlens_k[static_cast<size_t>(s)], nk = p.cu_seqlens_k[static_cast<size_t>(s) + 1] - ka;
    const int64_t qt = q.cu_seqlens_q[k], kt = q.cu_seqlens_k[k];
    rows(x.q, qt, src.q, qa, nq), rows(x.k, kt, src.k, ka, nk), rows(x.v, kt, src.v, ka, nk);
    if (order[k] < 0) continue;
    for (int64_t r = 0; r < nq; ++r) f.qmap[static_cast<size_t>(qa + r)] = qt + r;
    for (int64_t r = 0; r < nk; ++r) f.kmap[static_cast<size_t>(ka + r)] = kt + r;
  }
  // A mask, bias or keep-mask [., ., Lq|1, Lk|1]: each sequence's block (its rows by its keys) moves with it (a
  // filler's is sequence 0's); the blocks between different sequences, never read, hold `cross`.
  auto remap = [&](const std::optional<Tensor>& t, double cross) -> std::optional<Tensor> {
    if (!t) return std::nullopt;
    std::vector<int64_t> sh = t->shape;
    const bool rowed = sh[2] == p.Lq && p.Lq > 1, keyed = sh[3] == p.Lk && p.Lk > 1;
    if (rowed) sh[2] = q.Lq;
    if (keyed) sh[3] = q.Lk;
    Tensor o(t->dtype, sh);
    o.fill(cross);
    for (size_t k = 0; k < order.size(); ++k) {
      const auto u = static_cast<size_t>(order[k] < 0 ? 0 : order[k]);
      const int64_t qa = p.cu_seqlens_q[u], nq = rowed ? p.cu_seqlens_q[u + 1] - qa : 1;
      const int64_t ka = p.cu_seqlens_k[u], nk = keyed ? p.cu_seqlens_k[u + 1] - ka : 1;
      for (int64_t b = 0; b < sh[0]; ++b)
        for (int64_t h = 0; h < sh[1]; ++h)
          for (int64_t r = 0; r < nq; ++r)
            for (int64_t c = 0; c < nk; ++c) {
              const int64_t at[4] = {b, h, rowed ? q.cu_seqlens_q[k] + r : 0, keyed ? q.cu_seqlens_k[k] + c : 0};
              const int64_t from[4] = {b, h, rowed ? qa + r : 0, keyed ? ka + c : 0};
              copy_element(o, at, *t, from);
            }
    }
    return o;
  };
  auto shape_of = [](const std::optional<Tensor>& t) -> std::optional<std::array<int64_t, 4>> {
    if (!t) return std::nullopt;
    return std::array<int64_t, 4>{t->shape[0], t->shape[1], t->shape[2], t->shape[3]};
  };
  x.mask = remap(in.mask, 0.0), x.bias = remap(in.bias, 0.0), x.keep = remap(in.keep, 0.0);
  q.mask_shape = shape_of(x.mask), q.bias_shape = shape_of(x.bias);
  validate(q, x);
  return f;
}

// The varlen forms: the sequences packed in reverse order, and after a filler sequence (every offset moves).
std::vector<Form> varlen_forms(const Problem& p, const Inputs& in, const Inputs& filler) {
  if (!p.doc_ids.empty() || p.topk > 0 || !p.mask_expr.empty() || !p.score_expr.empty())
    throw std::invalid_argument(
        "the varlen forms of a case with doc ids, top-k indices or an expression are not "
        "built (their key positions would need renumbering)");
  const int64_t S = p.sequences();
  std::vector<int64_t> reversed, after;
  for (int64_t s = S - 1; s >= 0; --s) reversed.push_back(s);
  after.push_back(-1);
  for (int64_t s = 0; s < S; ++s) after.push_back(s);
  std::vector<Form> forms;
  if (S > 1) {
    forms.push_back(repacked(p, in, filler, reversed));
    forms.back().what = "packed in reverse sequence order";
  }
  forms.push_back(repacked(p, in, filler, after));
  forms.back().what = "packed after another sequence";
  return forms;
}

// The batch forms of a case: B = 1: after a filler sequence (position 1 of 2); B > 1: entry 0 alone, and every entry
// in a batch of B + 1 whose first sequence is a filler and whose last is entry 0. With `pad`, the forms' keys are
// padded to a filler's longer length.
std::vector<Form> batch_forms(const Problem& p, const Inputs& in, const Inputs& filler, bool pad) {
  const int64_t lk = pad ? p.Lk + std::max<int64_t>(3, p.Lk / 3) : p.Lk;
  const bool lengths = pad || !p.key_lengths.empty();
  auto own = [&](int64_t b) { return lengths ? p.key_length(b) : -1; };
  std::vector<Form> forms;
  if (p.B > 1) {
    Form a = gather(p, in, {{&in, 0, own(0)}}, p.Lk);
    a.what = "alone (a batch of 1)";
    a.targets = {{0, 0}};
    forms.push_back(std::move(a));
  }
  std::vector<Entry> es = {{&filler, 0, lengths ? lk : -1}};
  if (pad)
    es.front().key_length = lk;
  else if (lengths)
    es.front().key_length = p.key_length(0);
  for (int64_t b = 1; b < p.B; ++b) es.push_back({&in, b, own(b)});
  es.push_back({&in, 0, own(0)});
  Form s = gather(p, in, es, lk);
  s.what = "in a batch of " + std::to_string(p.B + 1) + " after another sequence (entry 0 last)" +
           (pad ? ", keys padded from " + std::to_string(p.Lk) + " to a neighbour's " + std::to_string(lk) : "");
  for (int64_t b = 1; b < p.B; ++b) s.targets.push_back({b, b});
  s.targets.push_back({0, p.B});
  forms.push_back(std::move(s));
  return forms;
}

std::vector<TensorDiff> diff_targets(const Problem& p, const Outputs& first, const Outputs& run,
                                     const std::vector<std::pair<int64_t, int64_t>>& targets) {
  std::vector<TensorDiff> ds;
  auto add = [&](const char* name, const std::optional<Tensor>& a, const std::optional<Tensor>& b, int64_t limit) {
    if (!a || !b) return;
    TensorDiff d;
    d.tensor = name;
    for (const auto& [e, pos] : targets) diff_block(d, *a, e, *b, pos, limit);
    ds.push_back(std::move(d));
  };
  add("out", first.out, run.out, kAll);
  add("lse", first.lse, run.lse, kAll);
  add("weights", first.weights, run.weights, p.Lk);
  add("scores", first.scores, run.scores, p.Lk);
  return ds;
}

// One run of a variant of the case (a batch form, a schedule setting, a layout) compared with the case as given.
struct Variant {
  std::string what;               // "in a batch of 2 ...", "under threads=1", "in BSHD"
  std::vector<TensorDiff> diffs;  // against the case as given
  bool bitwise = true;            // judged bit for bit; else within tolerance
  std::string outside;            // judged within tolerance: what is outside it ("" = within)
  int64_t moved() const {
    int64_t n = 0;
    for (const auto& d : diffs) n += d.moved;
    return n;
  }
  bool violated() const { return bitwise ? moved() > 0 : !outside.empty(); }
};

void accumulate(std::vector<TensorDiff>& into, const std::vector<TensorDiff>& ds) {
  for (const TensorDiff& d : ds) {
    auto it = std::find_if(into.begin(), into.end(), [&](const TensorDiff& t) { return t.tensor == d.tensor; });
    if (it == into.end()) {
      into.push_back(d);
      continue;
    }
    it->elements += d.elements, it->moved += d.moved, it->bits += d.bits;
    it->max_abs = std::max(it->max_abs, d.max_abs);
    if (it->first.empty()) it->first = d.first;
  }
}

std::string joined(const std::vector<std::string>& xs) {
  std::string s;
  for (const auto& x : xs) s += (s.empty() ? "" : "; ") + x;
  return s;
}

// The check of a kind from its variant runs: violated when a bitwise variant moved a bit or one judged within
// tolerance left it. A violation reads `pre` + the violating variants + `post`; a clean check "<kind>-invariant on
// this run: " (or, when bits moved within tolerance, "within tolerance on this run, not bitwise: ") + `subject` +
// what held.
Check fold(Kind k, const std::vector<Variant>& vs, const std::string& subject, const std::string& pre,
           const std::string& post) {
  Check c;
  c.kind = k;
  std::vector<std::string> bad, bitwise, tolerant;
  std::vector<TensorDiff> tol_diffs;
  std::string outside;
  for (const Variant& v : vs) {
    accumulate(c.diffs, v.diffs);
    if (!v.bitwise) accumulate(tol_diffs, v.diffs);
    if (v.violated()) bad.push_back(v.what);
    if (outside.empty()) outside = v.outside;
    (v.bitwise ? bitwise : tolerant).push_back(v.what);
  }
  if (!bad.empty()) {
    c.result = Check::violated;
    c.where = pre + joined(bad) + post;
    const std::string first = first_moved(c.diffs);
    c.message = std::string(tag(k)) + ": " + c.where +
                (outside.empty() ? "" : " (outside tolerance: " + outside + ")") + ": " + summary(c.diffs) +
                (first.empty() ? "" : "; first " + first);
    return c;
  }
  int64_t n_bit = 0, n_tol = 0, moved = 0, bits = 0;
  for (const Variant& v : vs)
    for (const TensorDiff& d : v.diffs) (v.bitwise ? n_bit : n_tol) += d.elements;
  for (const TensorDiff& d : tol_diffs) moved += d.moved, bits += d.bits;
  std::string held;
  if (!bitwise.empty()) held = "bitwise equal " + joined(bitwise) + " (" + std::to_string(n_bit) + " elements)";
  if (!tolerant.empty())
    held += (held.empty() ? "" : "; ") + std::string("within tolerance ") + joined(tolerant) + " (" +
            std::to_string(moved) + " of " + std::to_string(n_tol) + " elements moved, " + std::to_string(bits) +
            " bits)";
  c.message = (moved ? std::string("within tolerance on this run, not bitwise: ")
                     : std::string(name(k)) + "-invariant on this run: ") +
              subject + " " + held;
  return c;
}

// The case's outputs with the target entries taken from a batch form's run: what the case as given would have
// produced had it been computed in that batch (for judging within tolerance).
Outputs rebuilt(const Outputs& first, const Outputs& run, const std::vector<std::pair<int64_t, int64_t>>& targets) {
  Outputs r = first;
  auto put = [](std::optional<Tensor>& dst, const std::optional<Tensor>& src, int64_t e, int64_t pos) {
    if (dst && src) put_entry(*dst, e, *src, pos, -1, std::nullopt);
  };
  for (const auto& [e, pos] : targets) {
    put_entry(r.out, e, run.out, pos, -1, std::nullopt);
    put(r.lse, run.lse, e, pos), put(r.weights, run.weights, e, pos), put(r.scores, run.scores, e, pos);
  }
  return r;
}

const char* kNoJudge = "not checked: judging within tolerance needs the reference, which this caller did not give";

// A varlen form's rows against the case's: out and lse of every row, weights and scores on each row's own keys.
// With `into`, copies them instead (into[row of the case] = run[row here]).
std::vector<TensorDiff> diff_mapped(const Problem& p, const Outputs& first, const Outputs& run, const Form& f,
                                    Outputs* into = nullptr) {
  std::vector<TensorDiff> ds;
  auto each = [&](const char* name, const Tensor* a, const Tensor* b, Tensor* dst, bool keyed) {
    if (!a || !b) return;
    TensorDiff d;
    d.tensor = name;
    const size_t r = a->shape.size();
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        const Problem::RowKeys rk = p.row_keys(0, i);
        const int64_t inner = keyed ? rk.end - rk.begin : r == 4 ? a->shape[3] : 1;
        for (int64_t e = 0; e < inner; ++e) {
          std::vector<int64_t> ia = {0, h, i}, ib = {0, h, f.qmap[static_cast<size_t>(i)]};
          if (r == 4) {
            ia.push_back(keyed ? rk.begin + e : e);
            ib.push_back(keyed ? f.kmap[static_cast<size_t>(rk.begin + e)] : e);
          }
          if (dst)
            copy_element(*dst, ia.data(), *b, ib.data());
          else
            diff_element(d, *a, ia, *b, ib);
        }
      }
    ds.push_back(std::move(d));
  };
  auto opt = [](const std::optional<Tensor>& t) { return t ? &*t : nullptr; };
  auto dst = [&](std::optional<Tensor>& t) { return into && t ? &*t : nullptr; };
  each("out", &first.out, &run.out, into ? &into->out : nullptr, false);
  each("lse", opt(first.lse), opt(run.lse), into ? dst(into->lse) : nullptr, false);
  each("weights", opt(first.weights), opt(run.weights), into ? dst(into->weights) : nullptr, true);
  each("scores", opt(first.scores), opt(run.scores), into ? dst(into->scores) : nullptr, true);
  return ds;
}

Check batch_check(const Impl& impl, const Problem& p, const Inputs& in, const Outputs& first, const Options& o,
                  int& runs) {
  Check c;
  c.kind = Kind::batch;
  const bool bitwise = o.level != Level::tolerance;
  if (!bitwise && !o.within_tolerance) {
    c.result = Check::unsupported, c.message = kNoJudge;
    return c;
  }
  const Inputs filler = other_values(p, in);
  std::vector<Form> forms;
  std::string why;
  const bool packed = !p.cu_seqlens_q.empty(), paged = p.page_size > 0;
  for (bool pad : {true, false}) {
    if (pad && (packed || !can_pad(impl, p))) continue;
    try {
      forms = packed  ? varlen_forms(p, in, filler)
              : paged ? paged_forms(p, in, filler, pad)
                      : batch_forms(p, in, filler, pad);
    } catch (const std::invalid_argument& e) {
      why = e.what();
      continue;
    }
    bool supported = true;
    for (const Form& f : forms)
      if (const Support s = impl.supports(f.p); !s.ok) supported = false, why = s.reason;
    if (supported) break;
    forms.clear();
  }
  if (forms.empty()) {
    c.result = Check::unsupported;
    c.message = "not checked: no batch form of this case is supported (" + why + ")";
    return c;
  }
  std::vector<Variant> vs;
  int spent = 0;
  for (const Form& f : forms) {
    Outputs x;
    const Support s = run_impl(impl, f.p, f.in, x);
    ++runs, ++spent;
    if (!s.ok) {
      c.result = Check::unsupported;
      c.message = "not checked: batch form " + f.what + " unsupported: " + s.reason;
      c.runs = spent;
      return c;
    }
    Variant v{f.what, packed ? diff_mapped(p, first, x, f) : diff_targets(p, first, x, f.targets), bitwise, ""};
    // A form that moved no bit is the case as given, whatever the row's own verdict says (a kernel wrong in every
    // form is that row's failure, not a variance): reported bitwise equal, never judged against the reference.
    if (v.moved() == 0) v.bitwise = true;
    if (!v.bitwise) {
      Outputs back = first;
      if (packed) (void)diff_mapped(p, first, x, f, &back);
      v.outside = o.within_tolerance(packed ? back : rebuilt(first, x, f.targets));
    }
    vs.push_back(std::move(v));
  }
  c = fold(Kind::batch, vs, packed ? "every sequence's rows" : "every entry's rows", "the case's rows computed ",
           " differ from the case as given (B=" + std::to_string(p.B) + ")");
  c.runs = spent;
  return c;
}

// Bit for bit the same values in a tensor whose storage follows `order` (storage_order's convention).
Tensor restrided(const Tensor& t, const std::vector<int>& order) {
  Tensor r(t.dtype, t.shape, order);
  const size_t n = dtype_size(t.dtype), rank = t.shape.size();
  if (t.numel() == 0) return r;
  std::vector<int64_t> i(rank, 0);
  for (;;) {
    std::memcpy(r.bytes.data() + static_cast<size_t>(r.offset(i.data())) * n,
                t.bytes.data() + static_cast<size_t>(t.offset(i.data())) * n, n);
    size_t k = rank;
    while (k > 0 && ++i[k - 1] == t.shape[k - 1]) i[--k] = 0;
    if (k == 0) return r;
  }
}

Inputs restrided(const Inputs& in, const std::vector<int>& order) {
  Inputs x = in;
  x.q = restrided(in.q, order), x.k = restrided(in.k, order), x.v = restrided(in.v, order);
  if (in.past_k) x.past_k = restrided(*in.past_k, order), x.past_v = restrided(*in.past_v, order);
  return x;
}

// A variant run of the case (same problem, or the same data in another layout): its diffs against the first run
// and, judged within tolerance, the verdict. Returns nullopt (with the reason) when the implementation declines it.
std::optional<Variant> variant_run(const Impl& impl, const Problem& p, const Inputs& in, const Outputs& first,
                                   const Options& o, bool bitwise, const std::string& what, int& runs,
                                   std::string& why) {
  Outputs x;
  const Support s = run_impl(impl, p, in, x);
  ++runs;
  if (!s.ok) {
    why = what + ": " + s.reason;
    return std::nullopt;
  }
  Variant v{what, diff_outputs(first, x), bitwise, ""};
  if (v.moved() == 0) v.bitwise = true;  // the case as given (see batch_check)
  if (!v.bitwise) v.outside = o.within_tolerance(x);
  return v;
}

// Other settings of each schedule knob the implementation declares: threads 1 and 3, num_splits 1 and 3, the
// work units in reverse order. Bitwise for the knobs it declares bitwise (or at the bitwise level).
// One variant run of the forward or the backward (a problem and its inputs in some form) against the case as given;
// nullopt (with the reason) when the implementation declines it.
using Runner = std::function<std::optional<Variant>(const Problem&, const Inputs&, bool bitwise,
                                                    const std::string& what, int& runs, std::string& why)>;

// `judge`: whether a variant can be judged within tolerance (the caller gave the reference).
Check schedule_check(const Impl& impl, const Problem& p, const Inputs& in, const Runner& run, bool judge,
                     const Options& o, int& runs) {
  const Declarations d = impl.declarations();
  Check c;
  c.kind = Kind::schedule;
  if (!d.schedule_knobs) {
    c.result = Check::unsupported;
    c.message = "not checked: " + impl.name() +
                " exposes no schedule knob (it declares none of threads, num_splits, "
                "block_order)";
    return c;
  }
  std::vector<Variant> vs;
  int spent = 0;
  for (ScheduleKnob k : {knob_threads, knob_num_splits, knob_block_order}) {
    if (!(d.schedule_knobs & k)) continue;
    const bool bitwise = o.level == Level::bitwise || (o.level == Level::declared && (d.schedule_bitwise & k));
    if (!bitwise && !judge) {
      c.result = Check::unsupported, c.message = kNoJudge;
      return c;
    }
    std::vector<Schedule> settings;
    if (k == knob_threads) settings = {Schedule{1, 0, false}, Schedule{3, 0, false}};
    if (k == knob_num_splits) settings = {Schedule{0, 1, false}, Schedule{0, 3, false}};
    if (k == knob_block_order) settings = {Schedule{0, 0, true}};
    for (const Schedule& s : settings) {
      const ScheduleScope scope(s);
      std::string why;
      auto v = run(p, in, bitwise, "under " + s.describe(), spent, why);
      if (!v) {
        c.result = Check::unsupported, c.runs = spent, c.message = "not checked: the run " + why;
        runs += spent;
        return c;
      }
      vs.push_back(std::move(*v));
    }
  }
  runs += spent;
  c = fold(Kind::schedule, vs, "the case", "the case run ", " differs from its run under its own schedule");
  c.runs = spent;
  if (const unsigned missing = kAllKnobs & ~d.schedule_knobs)
    c.message += " (not exposed, so not checked: " + knob_list(missing) + ")";
  return c;
}

// The tensors `ts` (logical [N, H_i, L, D], one dtype, N, L and D alike) as slices of one buffer [N, L, sum H_i, D],
// as a fused QKV projection leaves them (FlashAttention's qkvpacked; [B, L, Hq + 2 Hkv, D] with GQA): each keeps
// its shape, with strides that step over the others' heads; its bytes start at its first element and run to the
// buffer's end (the others' values in its gaps, as in the shared buffer). False when they cannot share one.
bool pack(const std::vector<Tensor*>& ts) {
  const Tensor& a = *ts.front();
  int64_t H = 0;
  for (const Tensor* t : ts) {
    if (t->dtype != a.dtype || t->shape[0] != a.shape[0] || t->shape[2] != a.shape[2] || t->shape[3] != a.shape[3])
      return false;
    H += t->shape[1];
  }
  const int64_t N = a.shape[0], L = a.shape[2], D = a.shape[3];
  const size_t es = dtype_size(a.dtype);
  const std::vector<int64_t> st = {L * H * D, D, H * D, 1};
  std::vector<uint8_t> buf(static_cast<size_t>(N * L * H * D) * es);
  std::vector<int64_t> start;
  int64_t h0 = 0;
  for (const Tensor* t : ts) {
    start.push_back(h0 * D);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < t->shape[1]; ++h)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t d = 0; d < D; ++d) {
            const int64_t i[4] = {n, h, l, d};
            std::memcpy(buf.data() + static_cast<size_t>(n * st[0] + (h0 + h) * st[1] + l * st[2] + d) * es,
                        t->bytes.data() + static_cast<size_t>(t->offset(i)) * es, es);
          }
    h0 += t->shape[1];
  }
  for (size_t k = 0; k < ts.size(); ++k) {
    ts[k]->strides = st;
    ts[k]->bytes.assign(buf.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(start[k]) * es), buf.end());
  }
  return true;
}

// q, k and v as slices of one packed QKV buffer, else k and v of one packed KV buffer ("" when neither fits).
std::string packed(Inputs& x) {
  if (pack({&x.q, &x.k, &x.v})) return "as slices of one packed QKV buffer (storage [B,L,Hq+2Hkv,D])";
  if (pack({&x.k, &x.v})) return "with k and v as slices of one packed KV buffer (storage [B,L,2Hkv,D])";
  return "";
}

// The same data in the other layout (BHSD <-> BSHD: q, k, v, the past and out), with sequence-major strides
// (storage [L, B, H, D], the head dim still innermost, the layout as given: Megatron's sbhd) and as slices of one
// packed buffer (strides with gaps).
Check layout_check(const Impl& impl, const Problem& p, const Inputs& in, const Runner& run, bool judge,
                   const Options& o, int& runs) {
  const Declarations d = impl.declarations();
  Check c;
  c.kind = Kind::layout;
  const bool bitwise = o.level == Level::bitwise || (o.level == Level::declared && d.layout_invariant);
  if (!bitwise && !judge) {
    c.result = Check::unsupported, c.message = kNoJudge;
    return c;
  }
  Problem other = p;
  other.layout = p.layout == Layout::BHSD ? Layout::BSHD : Layout::BHSD;
  const std::vector<std::pair<std::string, std::pair<const Problem*, std::vector<int>>>> forms = {
      {std::string("in ") + to_string(other.layout), {&other, storage_order(other.layout)}},
      {"with sequence-major strides (storage [L,B,H,D])", {&p, {2, 0, 1, 3}}}};
  std::vector<Variant> vs;
  std::vector<std::string> skipped;
  int spent = 0;
  for (const auto& [what, form] : forms) {
    if (const Support s = impl.supports(*form.first); !s.ok) {
      skipped.push_back(what + ": " + s.reason);
      continue;
    }
    std::string why;
    auto v = run(*form.first, restrided(in, form.second), bitwise, what, spent, why);
    if (v)
      vs.push_back(std::move(*v));
    else
      skipped.push_back(why);
  }
  Inputs gaps = in;
  const std::string what = packed(gaps);
  std::string why;
  if (what.empty())
    skipped.push_back("packed slices: q, k and v differ in dtype, length or head dim");
  else if (auto v = run(p, gaps, bitwise, what, spent, why))
    vs.push_back(std::move(*v));
  else
    skipped.push_back(why);
  runs += spent;
  if (vs.empty()) {
    c.result = Check::unsupported, c.runs = spent, c.message = "not checked: " + joined(skipped);
    return c;
  }
  c = fold(Kind::layout, vs, "the case", "the case run ",
           std::string(" differs from the case as given (") + to_string(p.layout) + ")");
  c.runs = spent;
  if (!skipped.empty()) c.message += " (unsupported, so not checked: " + joined(skipped) + ")";
  return c;
}

std::string run_list(const std::vector<std::string>& runs) {
  std::string s;
  for (const auto& r : runs) s += (s.empty() ? "" : ", ") + r;
  return s;
}

}  // namespace

std::vector<TensorDiff> diff_gradients(const Gradients& a, const Gradients& b) {
  std::vector<TensorDiff> ds = {diff_whole("dq", a.dq, b.dq), diff_whole("dk", a.dk, b.dk),
                                diff_whole("dv", a.dv, b.dv)};
  if (a.dbias && b.dbias) ds.push_back(diff_whole("dbias", *a.dbias, *b.dbias));
  return ds;
}

std::vector<TensorDiff> diff_outputs(const Outputs& a, const Outputs& b) {
  std::vector<TensorDiff> ds = {diff_whole("out", a.out, b.out)};
  auto add = [&](const char* name, const std::optional<Tensor>& x, const std::optional<Tensor>& y) {
    if (x && y) ds.push_back(diff_whole(name, *x, *y));
  };
  add("lse", a.lse, b.lse);
  add("weights", a.weights, b.weights);
  add("scores", a.scores, b.scores);
  add("present_k", a.present_k, b.present_k);
  add("present_v", a.present_v, b.present_v);
  return ds;
}

namespace {

// The rerun check being accumulated: each run's diffs against the first run, the runs that differ.
struct Reruns {
  Check c;
  std::vector<std::string> differing;
  int runs = 0;
  void record(int k, std::vector<TensorDiff> d) {
    ++c.runs;
    int64_t moved = 0;
    for (const auto& x : d) moved += x.moved;
    if (moved) differing.push_back(std::to_string(k) + (k >= 3 ? " (after another case)" : ""));
    if (c.result != Check::violated) {
      if (moved) c.result = Check::violated;
      c.diffs = std::move(d);
    }
  }
  Check done(int K) {
    if (c.result == Check::violated) {
      c.where = "run " + run_list(differing) + " of " + std::to_string(K) + " differs from run 1";
      c.message =
          std::string(tag(Kind::rerun)) + ": " + c.where + ": " + summary(c.diffs) + "; first " + first_moved(c.diffs);
    } else {
      c.message = "invariant on this run: " + std::to_string(K) + " runs bitwise equal (" + summary(c.diffs) +
                  " elements" +
                  (K == 3  ? "; run 3 after another case"
                   : K > 3 ? "; runs 3.." + std::to_string(K) + " each after another case"
                           : "") +
                  ")";
    }
    return c;
  }
};

}  // namespace

std::vector<Check> check_forward(const Impl& impl, const Problem& p, const Inputs& in, const Outputs& first,
                                 const Options& o) {
  if (o.runs < 2) throw std::invalid_argument("invariance: runs must be >= 2, got " + std::to_string(o.runs));
  auto again = [&] {
    Outputs x;
    const Support s = run_impl(impl, p, in, x);
    if (!s.ok) throw std::runtime_error("a rerun of a supported case was declined: " + s.reason);
    return diff_outputs(first, x);
  };
  const Inputs others = other_values(p, in);
  Reruns r;
  // Run 2 right away, then the batch forms (other cases), then runs 3..K, each after another case.
  if (o.rerun) r.record(2, again());
  int batch_runs = 0;
  std::optional<Check> batch;
  if (o.batch) batch = batch_check(impl, p, in, first, o, batch_runs);
  for (int k = 3; o.rerun && k <= o.runs; ++k) {
    if (k > 3 || batch_runs == 0) {
      Outputs x;
      (void)run_impl(impl, p, others, x);
      ++r.c.runs;
    }
    r.record(k, again());
  }
  std::vector<Check> out;
  if (o.rerun) out.push_back(r.done(o.runs));
  int spent = 0;
  if (batch) out.push_back(*batch);
  const Runner run = [&](const Problem& q, const Inputs& x, bool bitwise, const std::string& what, int& n,
                         std::string& why) { return variant_run(impl, q, x, first, o, bitwise, what, n, why); };
  if (o.schedule) out.push_back(schedule_check(impl, p, in, run, bool(o.within_tolerance), o, spent));
  if (o.layout) out.push_back(layout_check(impl, p, in, run, bool(o.within_tolerance), o, spent));
  if (o.rerun && out.front().result == Check::violated)
    for (size_t k = 1; k < out.size(); ++k)
      if (out[k].result == Check::violated) {
        out[k].result = Check::unsupported;
        out[k].message = std::string("not judged: the reruns differ (nondeterministic), so a ") + name(out[k].kind) +
                         " difference may be run-to-run";
      }
  return out;
}

Check check_backward(const Impl& impl, const Problem& p, const Inputs& in, const Tensor& dout, const Gradients& first,
                     int K) {
  if (K < 2) throw std::invalid_argument("invariance: runs must be >= 2, got " + std::to_string(K));
  auto again = [&](const Inputs& x) {
    Gradients g;
    const Support s = run_backward_impl(impl, p, x, dout, g);
    if (!s.ok) throw std::runtime_error("a backward rerun of a supported case was declined: " + s.reason);
    return g;
  };
  const Inputs others = other_values(p, in);
  Reruns r;
  for (int k = 2; k <= K; ++k) {
    if (k >= 3) (void)again(others), ++r.c.runs;
    r.record(k, diff_gradients(first, again(in)));
  }
  return r.done(K);
}

namespace {

// The batch check of the backward: the unpadded batch forms of the forward (entry 0 alone; every entry in a batch of
// B + 1 after a filler with entry 0 last), dout following its entries (the filler's: dout's values rotated). Each
// entry's dq, dk and dv (its own keys and values) against the case's; dbias too when the bias is per entry (a
// shared bias's dbias sums over the batch, so it is not an entry's).
Check backward_batch_check(const Impl& impl, const Problem& p, const Inputs& in, const Tensor& dout,
                           const Gradients& first, const Options& o, int& runs) {
  Check c;
  c.kind = Kind::batch;
  const bool bitwise = o.level != Level::tolerance;
  if (!p.cu_seqlens_q.empty() || p.page_size > 0 || p.past_len > 0) {
    c.result = Check::unsupported;
    c.message = "not checked: the backward batch forms of a varlen, paged or KV-cache-append problem are not built";
    return c;
  }
  if (!bitwise && !o.backward_within_tolerance) {
    c.result = Check::unsupported, c.message = kNoJudge;
    return c;
  }
  const Inputs filler = other_values(p, in);
  const Tensor dout_filler = rotated(dout, 5);
  std::vector<Form> forms;
  try {
    forms = batch_forms(p, in, filler, false);
  } catch (const std::invalid_argument& e) {
    c.result = Check::unsupported;
    c.message = "not checked: no batch form of this case is built (" + std::string(e.what()) + ")";
    return c;
  }
  const bool dbias = first.dbias && p.B > 1 && first.dbias->shape[0] == p.B;
  std::vector<Variant> vs;
  int spent = 0;
  for (const Form& f : forms) {
    if (const Support s = impl.supports_backward(f.p); !s.ok) {
      c.result = Check::unsupported, c.runs = spent;
      c.message = "not checked: backward batch form " + f.what + " unsupported: " + s.reason;
      runs += spent;
      return c;
    }
    // dout of the form: entry e's from the case (or the filler's for the form's extra sequence).
    Tensor d = make_dout(f.p);
    std::vector<bool> is_target(static_cast<size_t>(f.p.B), false);
    for (const auto& [e, pos] : f.targets)
      put_entry(d, pos, dout, e, -1, std::nullopt), is_target[static_cast<size_t>(pos)] = true;
    for (int64_t pos = 0; pos < f.p.B; ++pos)
      if (!is_target[static_cast<size_t>(pos)]) put_entry(d, pos, dout_filler, 0, -1, std::nullopt);
    Gradients g;
    const Support s = run_backward_impl(impl, f.p, f.in, d, g);
    ++spent;
    if (!s.ok) {
      c.result = Check::unsupported, c.runs = spent;
      c.message = "not checked: backward batch form " + f.what + " unsupported: " + s.reason;
      runs += spent;
      return c;
    }
    std::vector<TensorDiff> ds;
    auto add = [&](const char* name, const Tensor& a, const Tensor& b) {
      TensorDiff t;
      t.tensor = name;
      for (const auto& [e, pos] : f.targets) diff_block(t, a, e, b, pos, kAll);
      ds.push_back(std::move(t));
    };
    add("dq", first.dq, g.dq), add("dk", first.dk, g.dk), add("dv", first.dv, g.dv);
    if (dbias && g.dbias) add("dbias", *first.dbias, *g.dbias);
    Variant v{f.what, std::move(ds), bitwise, ""};
    if (v.moved() == 0) v.bitwise = true;  // the case as given (see batch_check)
    if (!v.bitwise) {
      Gradients back = first;
      for (const auto& [e, pos] : f.targets) {
        put_entry(back.dq, e, g.dq, pos, -1, std::nullopt), put_entry(back.dk, e, g.dk, pos, -1, std::nullopt);
        put_entry(back.dv, e, g.dv, pos, -1, std::nullopt);
        if (dbias && g.dbias) put_entry(*back.dbias, e, *g.dbias, pos, -1, std::nullopt);
      }
      v.outside = o.backward_within_tolerance(back);
    }
    vs.push_back(std::move(v));
  }
  runs += spent;
  c = fold(Kind::batch, vs, "every entry's gradients", "the case's gradients computed ",
           " differ from the case as given (B=" + std::to_string(p.B) + ")");
  c.runs = spent;
  if (first.dbias && !dbias) c.message += " (dbias not compared: the bias is shared across the batch)";
  return c;
}

}  // namespace

std::vector<Check> check_backward_variants(const Impl& impl, const Problem& p, const Inputs& in, const Tensor& dout,
                                           const Gradients& first, const Options& o) {
  const Runner run = [&](const Problem& q, const Inputs& x, bool bitwise, const std::string& what, int& n,
                         std::string& why) -> std::optional<Variant> {
    Gradients g;
    // dout is in the layout of out: restrided with it when the form changes the layout.
    const Support s =
        run_backward_impl(impl, q, x, q.layout == p.layout ? dout : restrided(dout, storage_order(q.layout)), g);
    ++n;
    if (!s.ok) {
      why = what + ": " + s.reason;
      return std::nullopt;
    }
    Variant v{what, diff_gradients(first, g), bitwise, ""};
    if (v.moved() == 0) v.bitwise = true;  // the case as given (see batch_check)
    if (!v.bitwise) v.outside = o.backward_within_tolerance(g);
    return v;
  };
  std::vector<Check> out;
  int spent = 0;
  const bool judge = bool(o.backward_within_tolerance);
  if (o.batch) out.push_back(backward_batch_check(impl, p, in, dout, first, o, spent));
  if (o.schedule) out.push_back(schedule_check(impl, p, in, run, judge, o, spent));
  if (o.layout) out.push_back(layout_check(impl, p, in, run, judge, o, spent));
  return out;
}

std::vector<std::string> evidence(const Check& c) {
  std::vector<std::string> lines;
  for (const auto& d : c.diffs)
    if (d.moved)
      lines.push_back(d.tensor + ": " + std::to_string(d.moved) + " of " + std::to_string(d.elements) +
                      " elements moved, " + std::to_string(d.bits) + " bits, max |diff| " + number(d.max_abs) +
                      "; first " + d.first);
  return lines;
}

}  // namespace attncheck::invariance
