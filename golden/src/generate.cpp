// Value generators (see generate.hpp). Everything here is integer arithmetic or correctly rounded IEEE
// operations, so the same seed gives the same inputs on every machine and compiler.
#include "attncheck/generate.hpp"

#include "attncheck/kv_cache.hpp"
#include "attncheck/mla.hpp"
#include "attncheck/mods.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace attncheck::gen {

namespace {
const std::vector<std::pair<Distribution, const char*>>& names() {
  static const std::vector<std::pair<Distribution, const char*>> n = {
      {Distribution::normal, "normal"},
      {Distribution::uniform, "uniform"},
      {Distribution::large_logits, "large_logits"},
      {Distribution::tied_maxima, "tied_maxima"},
      {Distribution::all_equal, "all_equal"},
      {Distribution::one_hot, "one_hot"},
      {Distribution::constant_v, "constant_v"},
      {Distribution::tiny, "tiny"},
      {Distribution::poison_masked, "poison_masked"},
      {Distribution::fp16_overflow, "fp16_overflow"},
      {Distribution::logits_30_80, "logits_30_80"},
      {Distribution::near_ties, "near_ties"},
      {Distribution::neg_inf_bias, "neg_inf_bias"},
      {Distribution::tile_edge_dominant, "tile_edge_dominant"},
      {Distribution::one_hot_v, "one_hot_v"},
      {Distribution::uniform_rows, "uniform_rows"}};
  return n;
}

// Largest finite value of a dtype: the "huge" poison.
double huge(DType t) {
  switch (t) {
    case DType::f16: return 65504.0;
    case DType::bf16: return 0x1.fep127;
    case DType::f32: return std::numeric_limits<float>::max();
    default: return 1e300;
  }
}
}  // namespace

const char* to_string(Distribution d) {
  for (const auto& [k, v] : names())
    if (k == d) return v;
  return "?";
}

Distribution distribution_from_string(const std::string& s) {
  std::string all;
  for (const auto& [k, v] : names()) {
    if (s == v) return k;
    all += (all.empty() ? "" : ", ") + std::string(v);
  }
  throw std::invalid_argument("distribution: unknown value '" + s + "' (expected one of " + all + ")");
}

const std::vector<Distribution>& all_distributions() {
  static const std::vector<Distribution> v = [] {
    std::vector<Distribution> out;
    for (const auto& [k, name] : names()) out.push_back(k);
    return out;
  }();
  return v;
}

bool key_visible_anywhere(const Problem& p, const Inputs& in, int64_t b, int64_t kvh, int64_t j) {
  const int64_t g = p.group_size();
  const ModSet mods(p);
  for (int64_t h = kvh * g; h < (kvh + 1) * g; ++h)
    for (int64_t i = 0; i < p.Lq; ++i) {
      const Problem::RowKeys rk = p.row_keys(b, i);
      const int64_t diag = rk.diag;
      if (j < rk.begin || j >= rk.valid_end) continue;  // another packed sequence's key, or padding
      if (p.causal && j > diag) continue;
      if (p.window_left >= 0 && j < diag - p.window_left) continue;
      if (p.window_right >= 0 && j > diag + p.window_right) continue;
      if (in.mask && in.mask->get_offset(broadcast_offset(*in.mask, b, h, i, j)) == 0) continue;
      if (!mods.visible(ModAt{b, h, i, diag, j})) continue;
      return true;
    }
  return false;
}

void page_inputs(const Problem& p, Inputs& in) {
  if (p.page_size == 0) return;
  Problem flat = p;
  flat.page_size = flat.num_pages = 0, flat.block_table.clear();
  const int64_t P = p.page_size, n = p.pages_per_seq();
  std::vector<int> owners(static_cast<size_t>(p.num_pages * P), 0);  // per pool slot: how many (b, j) map to it
  auto slot_of = [&](int64_t b, int64_t j) { return p.block_table[static_cast<size_t>(b * n + j / P)] * P + j % P; };
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t j = 0; j < p.Lk; ++j) ++owners[static_cast<size_t>(slot_of(b, j))];
  // A quantized cache's per-token and per-block scales (and q4_1's mins) move with their codes, into the same slot.
  for (int which : {1, 2}) {
    Tensor& t = which == 1 ? in.k : in.v;
    Tensor pool = make_qkv(p, which);
    // Unused slots: NaN where the codes can hold it, else code 0 with a NaN scale (so a wrong read still shows).
    const bool codes = p.kv_quantized() && (p.kv_dtype == DType::i8 || is_q4(p.kv_dtype));
    pool.fill(codes ? 0.0 : std::numeric_limits<double>::quiet_NaN());
    std::vector<std::pair<std::optional<Tensor>*, Tensor>> scales;  // (flat, pool)
    if (kv_scales_in_pages(p))
      for (std::optional<Tensor>* s :
           which == 1 ? std::array{&in.k_scale, &in.k_min} : std::array{&in.v_scale, &in.v_min})
        if (*s) {
          scales.emplace_back(s, make_kv_scale(p, which));
          scales.back().second.fill(std::numeric_limits<double>::quiet_NaN());
        }
    for (int64_t h = 0; h < p.Hkv; ++h) {
      std::vector<char> taken(owners.size(), 0);  // 1: written, 2: written by an owner some query sees
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t j = 0; j < p.Lk; ++j) {
          const size_t s = static_cast<size_t>(slot_of(b, j));
          const char mine = owners[s] > 1 && key_visible_anywhere(flat, in, b, h, j) ? 2 : 1;
          if (taken[s] >= mine) continue;
          taken[s] = mine;
          const int64_t page = static_cast<int64_t>(s) / P, slot = static_cast<int64_t>(s) % P;
          for (int64_t d = 0; d < t.shape[3]; ++d) pool.put(page, h, slot, d, t.at(b, h, j, d));
          for (auto& [from, to] : scales)
            for (int64_t g = 0; g < to.shape[3]; ++g) to.put(page, h, slot, g, (*from)->at(b, h, j, g));
        }
    }
    t = std::move(pool);
    for (auto& [from, to] : scales) *from = std::move(to);
  }
}

Inputs generate_inputs(const Problem& p, Distribution dist, uint64_t seed) {
  validate(p);
  if (p.mla) {  // absorbed MLA: the latent cache drawn as keys, v its first Dv columns (mla.hpp)
    Problem keys = p;
    keys.mla = false;
    Inputs in = generate_inputs(keys, dist, seed);
    tie_latent_values(p, in);
    return in;
  }
  if (p.page_size > 0) {  // the contiguous problem's inputs, moved into pages (the same tokens, NaN elsewhere)
    Problem flat = p;
    flat.page_size = flat.num_pages = 0, flat.block_table.clear();
    Inputs in = generate_inputs(flat, dist, seed);
    page_inputs(p, in);
    return in;
  }
  if (p.past_len > 0) {
    // KV-cache append: the inputs of attending over the whole sequence, its first past_len tokens moved into the
    // past (so a fixture with a past and one without hold the same sequence, hazards and poison included).
    Problem whole = p;
    whole.past_len = 0;
    Inputs in = generate_inputs(whole, dist, seed);
    split_past(p, in);
    return in;
  }
  if (is_fp8(p.dtype)) {
    // fp8: the values drawn in double for the same problem, then quantised as a producer does: code = value /
    // descale, rounded once to the format (a value beyond its range becomes NaN or inf, like the poison).
    Problem wide = p;
    wide.dtype = DType::f64, wide.descale_q = wide.descale_k = wide.descale_v = 1.0;
    Inputs in = generate_inputs(wide, dist, seed);
    auto quantise = [&](Tensor& t, double descale) {
      Tensor c(p.dtype, t.shape, std::vector<int>{});
      c.strides = t.strides;  // the same layout
      for (int64_t n = 0; n < t.numel(); ++n) c.set_offset(n, t.get_offset(n) / descale);
      t = std::move(c);
    };
    quantise(in.q, p.descale_q), quantise(in.k, p.descale_k), quantise(in.v, p.descale_v);
    return in;
  }
  if (p.kv_quantized()) {
    // Quantized KV cache: the values drawn for the same problem with a plain cache, then quantised as a serving
    // stack does (kv_cache.hpp: each group's scale from its own largest value, so scales differ group by group).
    Problem plain = p;
    const Problem d;
    plain.kv_scales = d.kv_scales, plain.kv_dtype = d.kv_dtype, plain.kv_block = d.kv_block;
    plain.kv_scale_dtype = d.kv_scale_dtype;
    Inputs in = generate_inputs(plain, dist, seed);
    quantize_kv(p, in);
    return in;
  }
  if (dist == Distribution::poison_masked && p.fill == MaskFill::finite)
    throw std::invalid_argument(
        "distribution: poison_masked needs fill=neg_inf (with a finite fill, masked keys take part in fully "
        "masked rows, so their poison legitimately reaches the output)");
  const Rng root(seed);
  Rng rq = root.split(1), rk = root.split(2), rv = root.split(3), rm = root.split(4), rb = root.split(5);
  Inputs in;
  in.q = make_qkv(p, 0);
  in.k = make_qkv(p, 1);
  in.v = make_qkv(p, 2);
  const double scale = p.effective_scale() == 0.0 ? 1.0 : std::abs(p.effective_scale());
  const double sqrt_d = std::sqrt(static_cast<double>(p.Dqk));  // sqrt is correctly rounded (IEEE 754)
  auto normal_q = [&](int64_t, int64_t, int64_t, int64_t) { return rq.normal(); };
  auto normal_k = [&](int64_t, int64_t, int64_t, int64_t) { return rk.normal(); };
  auto normal_v = [&](int64_t, int64_t, int64_t, int64_t) { return rv.normal(); };

  switch (dist) {
    case Distribution::normal:
    case Distribution::poison_masked:
      fill4(in.q, normal_q);
      fill4(in.k, normal_k);
      fill4(in.v, normal_v);
      break;
    case Distribution::uniform:
      fill4(in.q, [&](auto...) { return rq.uniform_signed(); });
      fill4(in.k, [&](auto...) { return rk.uniform_signed(); });
      fill4(in.v, [&](auto...) { return rv.uniform_signed(); });
      break;
    case Distribution::large_logits: {
      // score = scale * q.k ~ scale * f^2 * sqrt(Dqk) * N(0,1); f^2 = 1e4 / (scale * sqrt(Dqk)) puts it at ~1e4.
      const double f = std::sqrt(1e4 / (scale * sqrt_d));
      fill4(in.q, [&](auto...) { return f * rq.normal(); });
      fill4(in.k, [&](auto...) { return f * rk.normal(); });
      fill4(in.v, normal_v);
      break;
    }
    case Distribution::tied_maxima:
    case Distribution::all_equal: {
      // Keys are copies of 3 (tied_maxima) or 1 (all_equal) random vectors per (b, kv head): exact score ties.
      const int64_t distinct = dist == Distribution::tied_maxima ? 3 : 1;
      std::vector<double> base(static_cast<size_t>(p.B * p.Hkv * distinct * p.Dqk));
      for (double& x : base) x = rk.normal();
      fill4(in.q, normal_q);
      fill4(in.k, [&](int64_t b, int64_t h, int64_t j, int64_t d) {
        return base[static_cast<size_t>(((b * p.Hkv + h) * distinct + j % distinct) * p.Dqk + d)];
      });
      fill4(in.v, normal_v);
      break;
    }
    case Distribution::one_hot: {
      // k_j = e_(j mod Dqk); q_i = c * e_(7i mod Dqk) with scale*c = 40: the matching key wins by 40 (e^-40).
      const double c = 40.0 / scale;
      fill4(in.q, [&](int64_t, int64_t, int64_t i, int64_t d) { return d == (7 * i) % p.Dqk ? c : 0.0; });
      fill4(in.k, [&](int64_t, int64_t, int64_t j, int64_t d) { return d == j % p.Dqk ? 1.0 : 0.0; });
      fill4(in.v, normal_v);
      break;
    }
    case Distribution::constant_v:
      fill4(in.q, normal_q);
      fill4(in.k, normal_k);
      fill4(in.v, [](auto...) { return 0.75; });
      break;
    case Distribution::tiny:
      fill4(in.q, [&](auto...) { return 0x1.0p-10 * rq.normal(); });
      fill4(in.k, [&](auto...) { return 0x1.0p-10 * rk.normal(); });
      fill4(in.v, [&](auto...) { return 0x1.0p-16 * rv.normal(); });
      break;
    default: break;
  }

  if (p.mask_shape) {
    const auto& s = *p.mask_shape;
    in.mask = Tensor(DType::u8, {s[0], s[1], s[2], s[3]});
    for (int64_t n = 0; n < in.mask->numel(); ++n) in.mask->set_offset(n, rm.uniform() < 0.75 ? 1.0 : 0.0);
  }
  if (p.bias_shape) {
    const auto& s = *p.bias_shape;
    in.bias = Tensor(p.bias_dtype, {s[0], s[1], s[2], s[3]});
    for (int64_t n = 0; n < in.bias->numel(); ++n) in.bias->set_offset(n, rb.normal());
  }
  if (p.dropout_p > 0) in.keep = make_keep_mask(p);
  fill_hazard(p, dist, in, rq, rk, rv);

  if (dist == Distribution::poison_masked) {
    // Only keys that no query can see are poisoned; the reference never reads them, nor may an implementation.
    const double big = huge(p.dtype), nan = std::numeric_limits<double>::quiet_NaN();
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j) {
          if (key_visible_anywhere(p, in, b, h, j)) continue;
          for (int64_t d = 0; d < p.Dqk; ++d) in.k.put(b, h, j, d, j % 2 ? ((d % 2) ? big : -big) : nan);
          for (int64_t d = 0; d < p.Dv; ++d) in.v.put(b, h, j, d, j % 2 ? nan : ((d % 2) ? -big : big));
        }
  }
  return in;
}

}  // namespace attncheck::gen
