// build_case: a CaseSpec made concrete. Every random choice comes from a SplitMix64 seeded by spec.seed, so a
// spec string is enough to rebuild the exact inputs. Values follow the spec's distribution; poison goes only into
// K/V (and full-bias) slots that no query can see, so any NaN in an output row that has a visible key is a leak.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <limits>

#include "attncheck/generate.hpp"
#include "attncheck/mods.hpp"
#include "case.hpp"

namespace attncheck::prop {

bool visible(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t diag = i + p.diagonal_offset(b);
  if (p.causal && j > diag) return false;
  if (j >= p.key_length(b)) return false;
  if (p.window_left >= 0 && j < diag - p.window_left) return false;
  if (p.window_right >= 0 && j > diag + p.window_right) return false;
  if (in.mask && in.mask->get_offset(broadcast_offset(*in.mask, b, h, i, j)) == 0) return false;
  return true;
}

bool row_fully_masked(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i) {
  if (p.sink(h) != -std::numeric_limits<double>::infinity()) return false;  // the sink keeps the row's softmax
  for (int64_t j = 0; j < p.Lk; ++j)
    if (visible(p, in, b, h, i, j)) return false;
  return true;
}

namespace {

void fill_normal(Tensor& t, SeededChooser& r, double scale) {
  for (int64_t n = 0; n < t.numel(); ++n) t.set_offset(n, scale * normal(r));
}

// q, k, v [B, H, L, D] by value distribution.
void fill_values(const CaseSpec& s, const Problem& p, Inputs& in, SeededChooser& r) {
  const double d4 = std::pow(static_cast<double>(p.Dqk), 0.25);
  switch (s.values) {
    case Values::normal:
    case Values::count: fill_normal(in.q, r, 1.0), fill_normal(in.k, r, 1.0), fill_normal(in.v, r, 1.0); break;
    case Values::large_logits:  // q.k/sqrt(d) ~ 1e4 * N(0,1)
      fill_normal(in.q, r, 100.0), fill_normal(in.k, r, 100.0), fill_normal(in.v, r, 1.0);
      break;
    case Values::beyond_fp16:  // raw q.k ~ 9e4 * d^(1/2) > 65504
      fill_normal(in.q, r, 300.0), fill_normal(in.k, r, 300.0), fill_normal(in.v, r, 1.0);
      break;
    case Values::tied_max: {
      fill_normal(in.q, r, 1.0), fill_normal(in.k, r, 1.0), fill_normal(in.v, r, 1.0);
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hkv; ++h) {
          const int64_t src = r.pick(0, p.Lk - 1);
          for (int64_t d = 0; d < p.Dqk; ++d) in.k.put(b, h, src, d, 3.0 * in.k.at(b, h, src, d));
          for (int64_t n = 0; n < std::max<int64_t>(1, p.Lk / 4); ++n) {
            const int64_t dst = r.pick(0, p.Lk - 1);
            for (int64_t d = 0; d < p.Dqk; ++d) in.k.put(b, h, dst, d, in.k.at(b, h, src, d));
          }
        }
      break;
    }
    case Values::all_equal:
      fill_normal(in.q, r, 1.0), fill_normal(in.v, r, 1.0);
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hkv; ++h)
          for (int64_t d = 0; d < p.Dqk; ++d) {
            const double x = normal(r);
            for (int64_t j = 0; j < p.Lk; ++j) in.k.put(b, h, j, d, x);
          }
      break;
    case Values::one_hot: {  // score 36 where the hot coordinates match, 0 elsewhere
      fill_normal(in.v, r, 1.0);
      const double c = 6.0 * d4;
      for (Tensor* t : {&in.q, &in.k})
        for (int64_t b = 0; b < t->shape[0]; ++b)
          for (int64_t h = 0; h < t->shape[1]; ++h)
            for (int64_t l = 0; l < t->shape[2]; ++l) t->put(b, h, l, r.pick(0, p.Dqk - 1), c);
      break;
    }
    case Values::constant_v: {
      fill_normal(in.q, r, 1.0), fill_normal(in.k, r, 1.0);
      const double c = 3.0 * normal(r);
      in.v.fill(c);
      break;
    }
    case Values::tiny: fill_normal(in.q, r, 1e-3), fill_normal(in.k, r, 1e-3), fill_normal(in.v, r, 1e-5); break;
    case Values::mixed:
      fill_normal(in.q, r, 3.0), fill_normal(in.k, r, 1.0);
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hkv; ++h)
          for (int64_t j = 0; j < p.Lk; ++j)
            for (int64_t d = 0; d < p.Dv; ++d) in.v.put(b, h, j, d, (j % 2 ? 1e3 : 1e-3) * normal(r));
      break;
  }
}

}  // namespace

Case build_case(const CaseSpec& s) {
  Case c;
  c.spec = s;
  Problem& p = c.p;
  SeededChooser r(s.seed * 0x2545F4914F6CDD1Dull + 17);
  p.B = s.B, p.Hq = s.Hq, p.Hkv = s.Hkv, p.Lq = s.Lq, p.Lk = s.Lk, p.Dqk = s.Dqk, p.Dv = s.Dv;
  p.dtype = s.dtype;
  p.layout = s.layout;
  p.causal = s.causal;
  p.alignment = s.alignment;
  p.causal_offset = s.causal_offset;
  if (s.per_batch_offsets)
    for (int64_t b = 0; b < s.B; ++b) p.causal_offsets.push_back(r.pick(-s.Lq, s.Lk));
  if (s.key_padding) {
    for (int64_t b = 0; b < s.B; ++b) p.key_lengths.push_back(r.pick(0, 3) == 0 ? s.Lk : r.pick(0, s.Lk));
    if (s.empty_rows) p.key_lengths.back() = 0;
    // Poison needs a key no query sees: make sure one batch is padded.
    if (s.poison && *std::min_element(p.key_lengths.begin(), p.key_lengths.end()) == s.Lk) p.key_lengths[0] = s.Lk - 1;
  }
  auto shape_of = [&](int kind) -> std::array<int64_t, 4> {
    switch (kind) {
      case 1: return {s.B, s.Hq, s.Lq, s.Lk};
      case 2: return {1, 1, s.Lq, s.Lk};
      default: return {s.B, 1, 1, s.Lk};
    }
  };
  if (s.mask_kind) p.mask_shape = shape_of(s.mask_kind);
  if (s.bias_kind)
    p.bias_shape = s.bias_kind == 2 ? std::array<int64_t, 4>{1, s.Hq, s.Lq, s.Lk} : shape_of(s.bias_kind);
  p.window_left = s.window_left;
  p.window_right = s.window_right;
  for (const auto& [name, value] : s.logit) {
    const ModEntry* m = find_logit_modification(name);
    if (!m) throw std::invalid_argument("CaseSpec::logit: no logit-stage entry '" + name + "'");
    set_logit_parameter(p, *m, value);
  }
  p.fill = s.finite_fill ? MaskFill::finite : MaskFill::neg_inf;
  p.fill_value = -1e9;
  p.fully_masked = s.fully_masked;
  const double d = 1.0 / std::sqrt(static_cast<double>(s.Dqk));
  if (s.scale_kind == 1) p.scale = d * (0.25 + 0.25 * static_cast<double>(r.pick(1, 8)));
  if (s.scale_kind == 2) p.scale = 0.0;
  if (s.scale_kind == 3) p.scale = -d * 0.5 * static_cast<double>(r.pick(1, 4));
  p.dropout_p = s.dropout_p;
  p.dropout_seed = s.seed;
  p.want_lse = s.want_lse;
  p.want_weights = s.want_weights;
  p.scores_out = s.scores_out;

  Inputs& in = c.in;
  in.q = make_qkv(p, 0), in.k = make_qkv(p, 1), in.v = make_qkv(p, 2);
  fill_values(s, p, in, r);
  if (p.mask_shape) {
    const auto& ms = *p.mask_shape;
    in.mask = Tensor(DType::u8, {ms[0], ms[1], ms[2], ms[3]});
    for (int64_t n = 0; n < in.mask->numel(); ++n) in.mask->set_offset(n, r.pick(0, 99) < s.mask_density);
    if (s.empty_rows && !s.key_padding)  // some whole rows (or, for a column mask, every column) masked
      for (int64_t row = 0; row < ms[0] * ms[1] * ms[2]; ++row)
        if (ms[2] == 1 ? row == 0 : r.pick(0, 3) == 0)
          for (int64_t j = 0; j < ms[3]; ++j) in.mask->set_offset(row * ms[3] + j, 0);
  }
  if (p.bias_shape) {
    const auto& bs = *p.bias_shape;
    in.bias = Tensor(p.bias_dtype, {bs[0], bs[1], bs[2], bs[3]});
    fill_normal(*in.bias, r, r.pick(0, 1) ? 1.0 : 10.0);
  }
  if (s.empty_rows && s.causal && s.alignment == Alignment::explicit_ && !s.key_padding && !s.mask_kind)
    p.causal_offset = -1 - r.pick(0, s.Lq / 2), p.causal_offsets.clear();
  if (p.dropout_p > 0) in.keep = make_keep_mask(p);

  if (s.poison) {  // poison K/V slots that no query reading them can see, and masked entries of a full bias
    static const double poisons[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                     -std::numeric_limits<double>::infinity(), 1e30};
    const int64_t g = p.group_size();
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t kh = 0; kh < p.Hkv; ++kh)
        for (int64_t j = 0; j < p.Lk; ++j) {
          bool seen = false;
          for (int64_t h = kh * g; h < (kh + 1) * g && !seen; ++h)
            for (int64_t i = 0; i < p.Lq && !seen; ++i) seen = visible(p, in, b, h, i, j);
          // A fully-masked row under the uniform policy averages every value: those values are seen.
          if (p.fully_masked == FullyMasked::uniform) seen = true;
          if (seen) continue;
          const double x = poisons[r.pick(0, 3)];
          for (int64_t e = 0; e < p.Dqk; ++e) in.k.put(b, kh, j, e, x);
          for (int64_t e = 0; e < p.Dv; ++e) in.v.put(b, kh, j, e, poisons[r.pick(0, 3)]);
        }
    if (in.bias && s.bias_kind == 1)
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hq; ++h)
          for (int64_t i = 0; i < p.Lq; ++i)
            for (int64_t j = 0; j < p.Lk; ++j)
              if (!visible(p, in, b, h, i, j) && p.fully_masked != FullyMasked::uniform)
                in.bias->put(b, h, i, j, std::numeric_limits<double>::quiet_NaN());
  }
  // Drawn last, so the inputs above are those of the same spec without sinks. bf16 values: exact in every dtype.
  for (int64_t h = 0; h < p.Hq && s.sinks_kind; ++h)
    p.sinks.push_back(s.sinks_kind == 2 && h % 2 == 0
                          ? -std::numeric_limits<double>::infinity()
                          : round_to(DType::bf16, (h % 3 == 2 ? 8.0 : 0.0) + 2.0 * normal(r)));
  // KV-cache append, drawn after everything else: the same sequence, its first past_len tokens moved to the past.
  if (s.kv_append && p.Lk > 1) {
    p.past_len = r.pick(1, p.Lk - 1);
    split_past(p, in);
  }
  // Packed sequences, drawn last: S - 1 cut points in the queries and in the keys (repeats make empty sequences).
  if (s.varlen && p.B == 1) {
    const int64_t S = r.pick(1, 4);
    for (auto [cu, L] : {std::pair{&p.cu_seqlens_q, p.Lq}, std::pair{&p.cu_seqlens_k, p.Lk}}) {
      cu->assign({0, L});
      for (int64_t n = 1; n < S; ++n) cu->push_back(r.pick(0, L));
      std::sort(cu->begin(), cu->end());
    }
  }
  // A paged KV cache, drawn last: page sizes 1 .. Lk + 1 (most do not divide Lk), pages in a shuffled order with
  // 0-2 of them unused, and batch 1 sharing batch 0's first page on odd draws; the same tokens, moved into pages.
  if (s.paged && p.past_len == 0 && p.cu_seqlens_q.empty()) {
    p.page_size = r.pick(1, p.Lk + 1);
    const int64_t n = p.pages_per_seq();
    p.num_pages = p.B * n + r.pick(0, 2);
    std::vector<int64_t> pages(static_cast<size_t>(p.num_pages));
    for (size_t e = 0; e < pages.size(); ++e) pages[e] = static_cast<int64_t>(e);
    for (size_t e = pages.size() - 1; e > 0; --e)
      std::swap(pages[e], pages[static_cast<size_t>(r.pick(0, static_cast<int64_t>(e)))]);
    p.block_table.assign(pages.begin(), pages.begin() + p.B * n);
    if (p.B > 1 && r.pick(0, 1)) p.block_table[static_cast<size_t>(n)] = p.block_table[0];
    gen::page_inputs(p, in);
  }
  // Library modifications, drawn after the inputs: each entry's own generator for the drawn shape. Masks only
  // remove keys and position stages move nothing, so the poisoned slots above stay unseen.
  for (const std::string& m : s.mods) find_modification(m)->draw(p, r);
  // fp8 descale factors, drawn last: 2^[-4, 2] * (1 + [0, 7]/8), so most are not powers of two.
  if (is_fp8(p.dtype))
    for (double* d : {&p.descale_q, &p.descale_k, &p.descale_v})
      *d = std::ldexp(1.0 + static_cast<double>(r.pick(0, 7)) / 8.0, static_cast<int>(r.pick(-4, 2)));
  return c;
}

}  // namespace attncheck::prop
