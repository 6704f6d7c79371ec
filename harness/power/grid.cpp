// The power grid: Lk x dtype x logit distribution, three problem shapes each (dense, causal with diagonals on a
// tile edge, a 256-key window), every correct variant on every shape, every fault on the shape it needs; the
// looped fp64 reference and judge() decide. A fault whose effect (how far it moves the base kernel's outputs) is
// no larger than a correct variant's error on the same problem is inside rounding noise, and the report says so.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "attncheck/mods.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/mla.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/rope.hpp"
#include "attncheck/tolerance.hpp"
#include "power.hpp"

namespace attncheck::power {

namespace {
Variant make(std::string name, std::string what, Fault f, Order o = Order::online, int block = 64) {
  Variant v;
  v.name = std::move(name), v.what = std::move(what), v.fault = f, v.order = o, v.block = block;
  return v;
}

constexpr int64_t kDqk = 64, kDv = 32;  // Dqk != Dv, so scaling by 1/sqrt(Dv) is a different scale

}  // namespace

int64_t index_wrap_pages(const Problem& p) {
  return static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(p.pages_per_seq())));
}

Problem grid_problem(int64_t lk, DType t, Flavour f, int64_t rows) {
  Problem p;
  p.Lq = rows, p.Lk = lk, p.Dqk = kDqk, p.Dv = kDv, p.dtype = t, p.want_lse = true;
  if (f != Flavour::dense) {
    // Diagonals of rows rows/2-1 and rows/2 are the last key of a tile and the first key of the next.
    p.alignment = Alignment::explicit_;
    p.causal_offset = lk - 64 - rows / 2;
    if (f == Flavour::causal) p.causal = true;
    if (f == Flavour::window) p.window_left = 255, p.window_right = 0;
  }
  if (f == Flavour::alibi || f == Flavour::document || f == Flavour::chunk || f == Flavour::kv_cache ||
      f == Flavour::mla || f == Flavour::max_logit || f == Flavour::fp8_out || f == Flavour::kv_q4_0 ||
      f == Flavour::kv_q4_1)
    p.causal = true;
  if (f == Flavour::fp8_out) p.fp8_out = true, p.o_dtype = DType::e4m3, p.scale_o = 96.0;
  if (f == Flavour::max_logit) {
    p.max_logit = MaxLogitOut::rows;
    for (const ModEntry& m : logit_modifications()) set_logit_parameter(p, m, m.examples[0]);
  }
  if (f == Flavour::mla) p.mla = true, p.scale = 1.0 / std::sqrt(48.0);  // a head of 48 before absorption
  if (f == Flavour::kv_cache) {
    p.kv_scales = KvScales::block, p.kv_dtype = DType::i8, p.kv_block = 16, p.kv_scale_dtype = DType::f16;
    p.page_size = 16;
    const int64_t n = p.pages_per_seq(), wrap = index_wrap_pages(p);
    p.num_pages = wrap + n - n / 2;
    for (int64_t k = 0; k < n; ++k) p.block_table.push_back(k < n / 2 ? k : wrap + k - n / 2);
  }
  if (f == Flavour::kv_q4_0 || f == Flavour::kv_q4_1)
    p.kv_scales = KvScales::block, p.kv_dtype = f == Flavour::kv_q4_0 ? DType::q4_0 : DType::q4_1,
    p.kv_block = kQ4Block, p.kv_scale_dtype = DType::f16;
  if (f == Flavour::alibi) p.Hq = 2, p.alibi_slopes = {0x1p-6, 0x1p-10};
  if (f == Flavour::document)
    for (int64_t j = 0; j < lk; ++j) p.doc_ids.push_back(j >= lk - 64 ? 1 : 0);
  if (f == Flavour::chunk) p.chunk_size = 64;
  if (f == Flavour::rope || f == Flavour::qk_norm) p.causal = true, p.rotary_dim = 32, p.rope_offsets = {65536 + 17};
  if (f == Flavour::qk_norm)
    for (int64_t d = 0; d < kDqk; ++d)
      p.q_norm_weight.push_back(1.0 + 0.25 * double(d % 5)), p.k_norm_weight.push_back(2.0 - 0.125 * double(d % 7));
  if (f ==
      Flavour::topk) {  // keys drawn from [1, diagonal] (key 0 never listed: it is where padding read as a key lands)
    p.causal = true, p.topk = std::min<int64_t>(lk / 4, 512);
    std::mt19937_64 g(static_cast<uint64_t>(lk) * 31 + 7);
    for (int64_t i = 0; i < rows; ++i) {
      std::vector<int64_t> keys(static_cast<size_t>(i + p.diagonal_offset(0)));
      std::iota(keys.begin(), keys.end(), int64_t{1});
      const int64_t listed = std::min<int64_t>(i % 2 ? p.topk - 1 - i : p.topk, static_cast<int64_t>(keys.size()));
      for (int64_t s = 0; s < listed; ++s)
        std::swap(keys[size_t(s)], keys[size_t(s + int64_t(g() % uint64_t(keys.size() - s)))]);
      for (int64_t s = 0; s < p.topk; ++s) p.topk_indices.push_back(s < listed ? keys[size_t(s)] : -1);
    }
  }
  return p;
}

namespace {
// The hazards a real suite plants where off-by-one and tiling bugs live (test-backend-ops and PyTorch use such
// cases): row i's keys on both sides of every mask edge (causal diagonal and the key after it, the window's first
// key and the one before it; same positions in every shape) and the first key of tile i*T/rows get a score
// ln(visible keys) - 2 + U(0,1), about 5-15% of the row's weight each, so including or dropping one moves the
// output by far more than rounding. V gets mean 1 (|out| ~ 1), so P·V rounding noise is small against |out|.
// Row i owns Q coordinate i % Dqk (set to 4, zero in the other rows' coordinates up to Dqk); a boosted key's
// coordinate there sets its score, so the boosts of different rows do not disturb each other.
void add_hazards(const Problem& p, Inputs& in, std::mt19937_64& g) {
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int64_t n = 0; n < in.v.numel(); ++n) in.v.set_offset(n, 1.0 + in.v.get_offset(n));
  const int64_t rows = p.Lq, own = std::min(rows, p.Dqk);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < own; ++c)
      in.q.put(0, 0, i, c, c == i % p.Dqk ? 4.0 : (i < own ? 0.0 : in.q.at(0, 0, i, c)));
  const double scale = p.effective_scale();
  const int64_t tiles = p.Lk / 64, corner = p.Lk - 64 - rows / 2, w = 255;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t diag = corner + i;
    const int64_t visible = p.topk > 0 ? p.topk : p.causal ? diag + 1 : p.window_left >= 0 ? p.window_left + 1 : p.Lk;
    const int64_t c = i % p.Dqk;
    // top-k: key 0 too, listed in no row, where a padding slot read as a key lands
    for (int64_t j :
         {diag, diag + 1, diag - w, diag - w - 1, 64 * (i * tiles / rows), p.topk > 0 ? int64_t{0} : int64_t{-1}}) {
      if (j < 0 || j >= p.Lk) continue;
      const double target = std::log(static_cast<double>(visible)) - 2.0 + u01(g);
      double rest = 0;
      for (int64_t d = 0; d < p.Dqk; ++d)
        if (d != c) rest += in.q.at(0, 0, i, d) * in.k.at(0, 0, j, d);
      in.k.put(0, 0, j, c, (target / scale - rest) / in.q.at(0, 0, i, c));
    }
  }
}
}  // namespace

Inputs grid_inputs(const Problem& p, Logits lg, uint64_t seed) {
  if (p.page_size > 0) {  // the contiguous cache's codes and scales, moved into the pages of the block table
    Problem flat = p;
    flat.page_size = flat.num_pages = 0, flat.block_table.clear();
    Inputs in = grid_inputs(flat, lg, seed);
    const auto to_pages = [&p](const Tensor& t, Tensor pool) {  // unused slots stay 0, as never-written ones
      for (int64_t j = 0; j < p.Lk; ++j)
        for (int64_t e = 0; e < t.shape[3]; ++e)
          pool.put(p.block_table[size_t(j / p.page_size)], 0, j % p.page_size, e, t.at(0, 0, j, e));
      return pool;
    };
    in.k = to_pages(in.k, Tensor(in.k.dtype, {p.num_pages, 1, p.page_size, p.Dqk}));
    in.v = to_pages(in.v, Tensor(in.v.dtype, {p.num_pages, 1, p.page_size, p.Dv}));
    if (kv_scales_in_pages(p))
      in.k_scale = to_pages(*in.k_scale, make_kv_scale(p, 1)), in.v_scale = to_pages(*in.v_scale, make_kv_scale(p, 2));
    return in;
  }
  if (p.kv_quantized()) {  // the same values as the plain cache's, quantised as a serving stack does
    Problem plain = p;
    plain.kv_scales = KvScales::none, plain.kv_dtype = DType::i8, plain.kv_block = 32,
    plain.kv_scale_dtype = DType::f32;
    Inputs in = grid_inputs(plain, lg, seed);
    quantize_kv(p, in);
    return in;
  }
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n01(0.0, 1.0);
  const double sd = lg == Logits::large ? std::sqrt(7.0) : 1.0;  // scores ~ N(0, 7^2): |s| up to ~30 at 128k
  Inputs in;
  in.q = Tensor(p.dtype, {1, p.Hq, p.Lq, p.Dqk});
  in.k = Tensor(p.dtype, {1, 1, p.Lk, p.Dqk});
  in.v = Tensor(p.dtype, {1, 1, p.Lk, p.Dv});
  for (int64_t n = 0; n < in.q.numel(); ++n) in.q.set_offset(n, sd * n01(g));
  for (int64_t n = 0; n < in.k.numel(); ++n) in.k.set_offset(n, sd * n01(g));
  for (int64_t n = 0; n < in.v.numel(); ++n) in.v.set_offset(n, n01(g));
  if (lg == Logits::near_one_hot) {
    // Row i gets one key with a score in [12, 15) (the rest ~N(0,1)), visible in every shape: j = diag - 100 - 6i.
    const double scale = p.effective_scale();
    std::uniform_real_distribution<double> target(12.0, 15.0);
    for (int64_t i = 0; i < p.Lq; ++i) {
      const double s_i = target(g);
      const int64_t j = p.Lk - 64 - p.Lq / 2 + i - 100 - 6 * i;
      double qq = 0;
      for (int64_t d = 0; d < p.Dqk; ++d) qq += in.q.at(0, 0, i, d) * in.q.at(0, 0, i, d);
      for (int64_t d = 0; d < p.Dqk; ++d) in.k.put(0, 0, j, d, in.q.at(0, 0, i, d) * s_i / (scale * qq));
    }
  }
  if (lg == Logits::hazard) add_hazards(p, in, g);
  if (uses_rope(p)) {
    // Every distribution is planted on the scores; with RoPE each q and k row is rotated back by its position
    // first, so after the kernel's rotation the scores are the planted ones (up to rounding to the dtype).
    const std::vector<double> inv = rope_inv_freq(p);
    auto unrotate = [&](Tensor& t, int64_t rows, bool query) {
      std::vector<double> x(static_cast<size_t>(p.Dqk));
      for (int64_t n = 0; n < rows; ++n) {
        const int64_t h = query ? n / p.Lq : 0, i = query ? n % p.Lq : n;
        for (int64_t d = 0; d < p.Dqk; ++d) x[size_t(d)] = t.at(0, h, i, d);
        rope_rotate(p, inv, -rope_position(p, 0, query ? i + p.diagonal_offset(0) : i), x.data());
        for (int64_t d = 0; d < p.Dqk; ++d) t.put(0, h, i, d, x[size_t(d)]);
      }
    };
    unrotate(in.q, p.Hq * p.Lq, true);
    unrotate(in.k, p.Lk, false);
  }
  if (p.mla) tie_latent_values(p, in);  // the scores as planted; v is what the latent cache holds
  if (uses_qk_norm(p))                  // mean(x^2) near eps (an exact power of two: the planted directions stay)
    for (Tensor* t : {&in.q, &in.k})
      for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, std::ldexp(t->get_offset(n), -10));
  return in;
}

namespace {
struct Judged {
  double ratio = 0, err_out = 0, err_lse = 0, err_ml = 0;
  std::string worst;
  Outputs outputs;
};

// Largest |a - b| over the elements of two outputs (inf where exactly one is non-finite).
double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_double(), y = b.to_double();
  double m = 0;
  for (size_t n = 0; n < x.size(); ++n) {
    const double d = std::abs(x[n] - y[n]);
    m = std::max(m, std::isfinite(d) ? d : (x[n] == y[n] ? 0.0 : INFINITY));
  }
  return m;
}

Judged judge_run(const Problem& p, const ExpectedAttention& ref, Outputs o, const ToleranceModel& m = {}) {
  const Verdict v = judge(p, ref, o, m);
  Judged j;
  j.outputs = std::move(o);

  for (const auto& t : v.tensors) {
    const double err = std::abs(t.actual - t.expected);
    const double r = std::isfinite(err) ? (t.tolerance > 0 ? err / t.tolerance : (err > 0 ? INFINITY : 0.0)) : INFINITY;
    if (r >= j.ratio) j.ratio = r, j.worst = t.describe();
    // amax_o, a statistic of the whole output, counts with max_logit
    (t.tensor == "out"                                 ? j.err_out
     : t.tensor == "max_logit" || t.tensor == "amax_o" ? j.err_ml
                                                       : j.err_lse) =
        std::isfinite(t.max_abs_err) ? t.max_abs_err : INFINITY;
  }
  return j;
}
}  // namespace

Flavour flavour_of(Fault f) {
  if (f == Fault::causal_excl_diag || f == Fault::causal_future_key) return Flavour::causal;
  if (f == Fault::window_off_by_one) return Flavour::window;
  if (f == Fault::alibi_sign || f == Fault::alibi_slope_head || f == Fault::alibi_ignored) return Flavour::alibi;
  if (f == Fault::document_off_by_one || f == Fault::block_partial_as_full) return Flavour::document;
  if (f == Fault::chunk_off_by_one) return Flavour::chunk;
  if (f == Fault::descale_ignored || f == Fault::descale_wrong_group || f == Fault::index_overflow)
    return Flavour::kv_cache;
  if (f == Fault::q4_nibble_swapped || f == Fault::q4_offset_ignored) return Flavour::kv_q4_0;
  if (f == Fault::q4_min_ignored || f == Fault::q4_next_block_scale) return Flavour::kv_q4_1;
  if (f == Fault::rope_interleave || f == Fault::rope_offset_ignored || f == Fault::rope_partial_wrong_half ||
      f == Fault::rope_off_by_one || f == Fault::rope_fp16_angles)
    return Flavour::rope;
  if (f == Fault::topk_padding) return Flavour::topk;
  if (f == Fault::mla_v_stride || f == Fault::mla_v_columns || f == Fault::mla_scale_dim) return Flavour::mla;
  if (f == Fault::max_logit_stage || f == Fault::max_logit_unscaled) return Flavour::max_logit;
  if (f == Fault::out_scale_ignored || f == Fault::out_scale_inverted || f == Fault::amax_o_scaled ||
      f == Fault::amax_o_after_cast)
    return Flavour::fp8_out;
  if (f == Fault::qk_norm_eps_ignored || f == Fault::qk_norm_eps_outside || f == Fault::qk_norm_k_skipped)
    return Flavour::qk_norm;
  return Flavour::dense;
}

const char* to_string(Flavour f) {
  const char* names[kFlavours] = {
      "dense", "causal", "window",    "alibi",   "document", "chunk",   "rope",   "kv-int8-block16-paged",
      "topk",  "mla",    "max-logit", "fp8-out", "kv-q4_0",  "kv-q4_1", "qk-norm"};
  return names[static_cast<int>(f)];
}
const char* to_string(Logits l) {
  return l == Logits::normal         ? "normal"
         : l == Logits::large        ? "large"
         : l == Logits::near_one_hot ? "near_one_hot"
                                     : "hazard";
}

std::vector<Variant> correct_variants() {
  std::vector<Variant> v{
      make("sequential", "two passes, keys summed in order", Fault::none, Order::sequential),
      make("pairwise", "two passes, pairwise sums", Fault::none, Order::pairwise),
      make("kahan", "two passes, compensated sums", Fault::none, Order::kahan),
      make("reversed", "two passes, keys and dot products summed last to first", Fault::none, Order::reversed),
      make("online-7", "online softmax, 7-key blocks", Fault::none, Order::online, 7),
      make("online-64", "online softmax, 64-key tiles (the base of every fault)", Fault::none),
      make("online-256", "online softmax, 256-key tiles", Fault::none, Order::online, 256),
      make("p-rounded", "unnormalised P rounded to the input dtype before P·V", Fault::none),
      make("exp2", "exp2 with log2(e) folded into the scale", Fault::none),
      make("fma", "fused multiply-add in dot products and P·V", Fault::none),
      make("ftz", "subnormal exps flushed to zero", Fault::none),
      make("dot-lanes-8", "dot products in 8 interleaved partial sums (SIMD lanes)", Fault::none),
      make("rope-table-fp16", "RoPE cos/sin from an fp16 table (fp32 angles)", Fault::none),
      make("rope-table-bf16", "RoPE cos/sin from a bf16 table (fp32 angles)", Fault::none),
      make("rope-fp64-angles", "RoPE angles in fp64 (the exact contract)", Fault::none),
  };
  v[7].p_rounded = true, v[8].exp2 = true, v[9].fma = true, v[10].ftz = true, v[11].lanes = 8;
  v[12].rope = RopeMath::table_fp16, v[13].rope = RopeMath::table_bf16, v[14].rope = RopeMath::exact;
  return v;
}

std::vector<Variant> fault_variants() {
  return {
      make("skip-tile", "one 64-key tile in the middle skipped", Fault::skip_tile),
      make("drop-max-key", "the highest-weight key skipped", Fault::drop_max_key),
      make("drop-random-key", "one random key skipped", Fault::drop_random_key),
      make("causal-excl-diag", "diagonal excluded where it is a tile's first key", Fault::causal_excl_diag),
      make("causal-future-key", "one future key included where the diagonal ends a tile", Fault::causal_future_key),
      make("window-off-by-one", "window admits one key too many on the left", Fault::window_off_by_one),
      make("scale-dv", "scale 1/sqrt(Dv) instead of 1/sqrt(Dqk)", Fault::scale_dv),
      make("tf32", "TF32 operands under the fp32 contract", Fault::tf32_operands),
      make("fp16-scores", "scores stored in fp16 under the fp32-score contract", Fault::fp16_scores),
      make("bf16-pv-acc", "P·V accumulated in bf16", Fault::bf16_pv_accumulation),
      make("missed-rescale", "online rescale skipped at one tile boundary", Fault::missed_rescale),
      make("row-1pct", "one row's output 1% off", Fault::row_1pct),
      make("row-4ulp", "one row's output 4 ulps off", Fault::row_4ulp),
      make("lse-plus-log2", "lse off by log 2", Fault::lse_plus_log2),
      make("lse-base2", "lse in base 2", Fault::lse_base2),
      make("alibi-sign", "ALiBi bias added with the wrong sign (+slope*|d|)", Fault::alibi_sign),
      make("alibi-slope-head", "ALiBi slope of the other query head", Fault::alibi_slope_head),
      make("alibi-ignored", "ALiBi slopes ignored (the modification is missing)", Fault::alibi_ignored),
      make("document-off-by-one", "a key's document read one token to the right", Fault::document_off_by_one),
      make("chunk-off-by-one", "a key's chunk computed from the next token", Fault::chunk_off_by_one),
      make("block-partial-as-full", "a partial 64 x 64 block of the block mask treated as full (its mask skipped)",
           Fault::block_partial_as_full),
      make("descale-ignored", "quantized KV cache: the scales dropped (codes read as values)", Fault::descale_ignored),
      make("descale-wrong-group", "quantized KV cache: every block of a token reads block 0's scale",
           Fault::descale_wrong_group),
      make("index-overflow", "paged KV cache: the page offset wrapped at a power of two (page p read as p mod W)",
           Fault::index_overflow),
      make("q4-nibble-swapped", "4-bit cache: a byte's two nibbles read the other way round (i high, i + 16 low)",
           Fault::q4_nibble_swapped),
      make("q4-offset-ignored", "4-bit cache: q4_0's offset 8 forgotten (d q for d (q - 8))", Fault::q4_offset_ignored),
      make("q4-min-ignored", "4-bit cache: q4_1's m ignored (d q for d q + m)", Fault::q4_min_ignored),
      make("q4-next-block-scale", "4-bit cache: every block reads the next block's d and m (block index off by one)",
           Fault::q4_next_block_scale),
      make("rope-interleave", "RoPE with GPT-J pairs where NeoX halves are declared", Fault::rope_interleave),
      make("rope-offset-ignored", "RoPE: the query rotated at its row index, its position offset ignored",
           Fault::rope_offset_ignored),
      make("rope-partial-wrong-half", "partial RoPE applied to the last rotary_dim dims",
           Fault::rope_partial_wrong_half),
      make("rope-off-by-one", "RoPE: the query rotated one position ahead", Fault::rope_off_by_one),
      make("rope-fp16-angles", "RoPE angles rounded to fp16", Fault::rope_fp16_angles),
      make("topk-padding", "top-k sparse: a padding slot (-1) read as key 0", Fault::topk_padding),
      make("mla-v-stride", "absorbed MLA: V rows stepped by Dv instead of the latent cache's row length",
           Fault::mla_v_stride),
      make("mla-v-columns", "absorbed MLA: V from the cache's last Dv columns (k_pe side)", Fault::mla_v_columns),
      make("mla-scale-dim", "absorbed MLA: scale 1/sqrt(Dqk) instead of the declared one", Fault::mla_scale_dim),
      make("max-logit-stage", "max-logit output taken before the logit stage", Fault::max_logit_stage),
      make("max-logit-unscaled", "max-logit output of the unscaled dot products", Fault::max_logit_unscaled),
      make("out-scale-ignored", "fp8 output: scale_o ignored (the codes of O)", Fault::out_scale_ignored),
      make("out-scale-inverted", "fp8 output: scale_o applied as a descale (the codes of O / scale_o)",
           Fault::out_scale_inverted),
      make("amax-o-scaled", "fp8 output: amax_o in scale_o units (max |O * scale_o|)", Fault::amax_o_scaled),
      make("amax-o-after-cast", "fp8 output: amax_o of the stored codes (max |code| / scale_o)",
           Fault::amax_o_after_cast),
      make("qk-norm-eps-ignored", "QK-norm without its eps", Fault::qk_norm_eps_ignored),
      make("qk-norm-eps-outside", "QK-norm with eps added outside the square root", Fault::qk_norm_eps_outside),
      make("qk-norm-k-skipped", "QK-norm applied to q only (k read as given)", Fault::qk_norm_k_skipped),
  };
}

Report run_grid(const GridOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Variant> good = correct_variants(), bad = fault_variants();
  const Flavour flavours[kFlavours] = {Flavour::dense,    Flavour::causal,  Flavour::window,    Flavour::alibi,
                                       Flavour::document, Flavour::chunk,   Flavour::rope,      Flavour::kv_cache,
                                       Flavour::topk,     Flavour::mla,     Flavour::max_logit, Flavour::fp8_out,
                                       Flavour::kv_q4_0,  Flavour::kv_q4_1, Flavour::qk_norm};
  Report rep;
  size_t configuration = 0;
  for (int64_t lk : o.lk)
    for (DType t : o.dtypes)
      for (Logits lg : o.logits) {
        const size_t unit = configuration++;
        if (o.runs_configuration && !o.runs_configuration(unit)) continue;
        if (o.on_configuration)
          o.on_configuration("Lk=" + std::to_string(lk) + " " + to_string(t) + " " + to_string(lg));
        const uint64_t seed = o.seed ^ (static_cast<uint64_t>(lk) * 0x9E3779B97F4A7C15ull) ^
                              (static_cast<uint64_t>(t) << 8) ^ (static_cast<uint64_t>(lg) << 16);
        Problem ps[kFlavours];
        Inputs ins[kFlavours];
        ExpectedAttention refs[kFlavours];
        for (int f = 0; f < kFlavours; ++f) {
          ps[f] = grid_problem(lk, t, flavours[f], o.rows);
          ins[f] = grid_inputs(ps[f], lg, seed);
          refs[f] = expected_attention(ps[f], ins[f], o.threads);
        }
        // Runs: every correct variant on every shape, every fault on its own shape.
        struct RunSpec {
          const Variant* v;
          int f;
        };
        std::vector<RunSpec> runs;
        for (const auto& v : good)
          for (int f = 0; f < kFlavours; ++f) runs.push_back({&v, f});
        for (const auto& v : bad) runs.push_back({&v, static_cast<int>(flavour_of(v.fault))});
        std::vector<Judged> res(runs.size());
        parallel_rows(static_cast<int64_t>(runs.size()), o.threads, [&](int64_t n) {
          const RunSpec& r = runs[static_cast<size_t>(n)];
          ToleranceModel m;  // RoPE: the variant's way to cos and sin, declared
          if (uses_rope(ps[r.f])) m.contract = default_contract(t), m.contract->rope = r.v->rope;
          res[static_cast<size_t>(n)] = judge_run(ps[r.f], refs[r.f], run_variant(*r.v, ps[r.f], ins[r.f]), m);
        });
        // The noise: the largest error of any correct variant on the same problem, per output tensor.
        double noise_out[kFlavours] = {}, noise_lse[kFlavours] = {}, noise_ml[kFlavours] = {};
        size_t base_run[kFlavours] = {};
        for (size_t n = 0; n < runs.size(); ++n)
          if (runs[n].v->correct()) {
            if (runs[n].v->name == "online-64") base_run[runs[n].f] = n;
            noise_out[runs[n].f] = std::max(noise_out[runs[n].f], res[n].err_out);
            noise_lse[runs[n].f] = std::max(noise_lse[runs[n].f], res[n].err_lse);
            noise_ml[runs[n].f] = std::max(noise_ml[runs[n].f], res[n].err_ml);
          }
        auto cell_of = [&](const Variant& v) {
          for (auto& c : rep.cells)
            if (c.variant == v.name && c.lk == lk && c.dtype == t && c.logits == lg) return &c;
          Cell c;
          c.variant = v.name, c.correct = v.correct(), c.lk = lk, c.dtype = t, c.logits = lg, c.configuration = unit;
          c.applicable = !(v.fault == Fault::tf32_operands && t != DType::f32);
          rep.cells.push_back(c);
          return &rep.cells.back();
        };
        if (o.candidate) {  // one more correct variant, run serially (an isolated worker serves one call at a time)
          const Variant cand = make(o.candidate->name, "the candidate, at its declared contract", Fault::none);
          for (int f = 0; f < kFlavours; ++f) {
            Judged j;
            try {
              std::string why;
              std::optional<Outputs> out = o.candidate->run(ps[f], ins[f], &why);
              if (!out) continue;  // unsupported: no cell
              ToleranceModel m;
              m.contract = o.candidate->contract(t);
              j = judge_run(ps[f], refs[f], std::move(*out), m);
            } catch (const std::exception& e) {
              j.ratio = INFINITY, j.worst = std::string(to_string(flavours[f])) + ": " + e.what();
              j.err_out = j.err_lse = INFINITY;
            }
            Cell* c = cell_of(cand);
            if (j.ratio >= c->ratio) c->ratio = j.ratio, c->worst = j.worst;
            c->fault_err = std::max(c->fault_err, std::max(j.err_out, j.err_lse));
            c->noise_err = std::max(noise_out[f], noise_lse[f]);
          }
        }
        for (size_t n = 0; n < runs.size(); ++n) {
          Cell* c = cell_of(*runs[n].v);
          const Judged& j = res[n];
          if (j.ratio >= c->ratio) c->ratio = j.ratio, c->worst = j.worst;
          if (c->correct) c->fault_err = std::max({c->fault_err, j.err_out, j.err_lse, j.err_ml});
          const int f = runs[n].f;
          c->noise_err = std::max({noise_out[f], noise_lse[f], noise_ml[f]});
          if (!c->correct) {
            // The fault's effect: how far it moves the base kernel's (online-64's) outputs.
            const Judged& base = res[base_run[f]];
            const double eff_out = max_diff(j.outputs.out, base.outputs.out) / ps[f].scale_o;  // fp8 codes decoded
            const double eff_lse = max_diff(*j.outputs.lse, *base.outputs.lse);
            const double eff_ml = j.outputs.max_logit ? max_diff(*j.outputs.max_logit, *base.outputs.max_logit)
                                  : j.outputs.amax_o  ? max_diff(*j.outputs.amax_o, *base.outputs.amax_o)
                                                      : 0.0;
            c->fault_err = std::max({eff_out, eff_lse, eff_ml});
            c->inside_noise =
                j.ratio <= 1.0 && eff_out <= noise_out[f] && eff_lse <= noise_lse[f] && eff_ml <= noise_ml[f];
          }
        }
      }
  summarise(rep, o.logits);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

void summarise(Report& rep, const std::vector<Logits>& logits) {
  rep.coverage.clear();
  rep.cells_detected = rep.cells_inside_noise = rep.cells_below_bound = 0;
  rep.faults = rep.detected = rep.undetectable = rep.missed = rep.not_applicable = rep.false_alarms = 0;
  rep.headroom_32k_fp32 = std::numeric_limits<double>::quiet_NaN();
  for (Logits lg : logits) {
    double worst = -1;
    for (const auto& c : rep.cells)
      if (c.correct && c.lk == 32768 && c.dtype == DType::f32 && c.logits == lg) worst = std::max(worst, c.ratio);
    if (worst >= 0)
      rep.headroom_32k_fp32 = std::isnan(rep.headroom_32k_fp32) ? worst : std::min(rep.headroom_32k_fp32, worst);
  }
  for (const auto& c : rep.cells) {
    if (c.correct) {
      rep.false_alarms += c.ratio > 1.0;
      continue;
    }
    Coverage* cov = nullptr;
    for (auto& k : rep.coverage)
      if (k.fault == c.variant && k.lk == c.lk && k.dtype == c.dtype) cov = &k;
    if (!cov) {
      rep.coverage.push_back(Coverage{c.variant, c.lk, c.dtype, {}, c.applicable, true});
      cov = &rep.coverage.back();
    }
    if (!c.applicable) continue;
    if (c.ratio > 1.0)
      ++rep.cells_detected, cov->caught_by.push_back(c.logits), cov->undetectable = false;
    else if (c.inside_noise)
      ++rep.cells_inside_noise;
    else
      ++rep.cells_below_bound, cov->undetectable = false;
  }
  for (auto& k : rep.coverage) {
    ++rep.faults;
    if (!k.applicable)
      ++rep.not_applicable;
    else if (!k.caught_by.empty())
      ++rep.detected;
    else if (k.undetectable)
      ++rep.undetectable;
    else
      ++rep.missed;
  }
  rep.accepted =
      rep.missed == 0 && rep.false_alarms == 0 && (std::isnan(rep.headroom_32k_fp32) || rep.headroom_32k_fp32 >= 0.01);
}

}  // namespace attncheck::power
