// The module golden suite: the seed tutorials' modules (self attention with and without qkv bias, causal with
// dropout on the weights, multi-head with separate, packed and interleaved weights, GQA, Dqk != Dv, key padding,
// an attention mask, cross attention) in fp32, fp16 and bf16 at small shapes (golden/ has a size cap).
#include <cmath>
#include <iterator>

#include "attncheck/module_suite.hpp"
#include "attncheck/rng.hpp"

namespace attncheck {

namespace {

void fill(Tensor& t, Rng r, double scale, bool normal) {
  for (int64_t n = 0; n < t.numel(); ++n) t.set_offset(n, scale * (normal ? r.normal() : r.uniform_signed()));
}

void fill_linear(std::optional<Tensor>& w, Rng r) {
  if (w) fill(*w, r, 2.0 / std::sqrt(static_cast<double>(w->shape.back())), false);
}

struct Case {
  const char* what;  // the seeds' module it stands for
  int64_t B, Lq, Lk, d_in, d_in2, Hq, Hkv, Dqk, Dv, d_out;
  Packing packing;
  bool qkv_bias, out_bias, causal, weights, average;
  const char* mask;  // "", "padding" ([B,1,1,Lk]) or "attn" ([1,1,Lq,Lk])
  double dropout;
  Alignment align = Alignment::top_left;
  const char* extra = "";  // "bias": an additive bias [1, Hq, Lq, Lk]; "lengths": key_lengths padding and a softcap
};

// clang-format off
const Case kCases[] = {
  // what                                  B Lq Lk din din2 Hq Hkv Dqk Dv dout packing               qb     ob     causal weights avg    mask       drop
  {"SelfAttention_v1 (x @ W)",             2, 6, 6, 6, 0,   1, 1,  4,  4, 4,  Packing::separate,    false, false, false, true,  false, "",        0},
  {"SelfAttention_v2 (nn.Linear, bias)",   2, 6, 6, 6, 0,   1, 1,  4,  4, 5,  Packing::separate,    true,  false, false, false, false, "",        0},
  {"CausalAttention, dropout on weights",  2, 6, 6, 6, 0,   1, 1,  4,  4, 4,  Packing::separate,    true,  false, true,  true,  false, "",        0.25},
  {"MultiHeadAttention (view, transpose)", 2, 5, 5, 8, 0,   2, 2,  4,  4, 8,  Packing::separate,    false, true,  true,  false, false, "",        0},
  {"nn.MultiheadAttention in_proj",        2, 5, 5, 8, 0,   4, 4,  2,  2, 8,  Packing::packed,      true,  true,  false, true,  true,  "",        0},
  {"Wqkv(x).reshape(B,S,nh,3,hs)",         2, 5, 5, 8, 0,   2, 2,  4,  4, 8,  Packing::interleaved, true,  true,  true,  true,  false, "",        0},
  {"GQA, separate",                        2, 5, 5, 8, 0,   4, 2,  2,  2, 6,  Packing::separate,    false, true,  true,  false, false, "",        0},
  {"GQA, packed",                          1, 7, 7, 8, 0,   4, 2,  2,  2, 6,  Packing::packed,      true,  false, false, true,  true,  "",        0},
  {"GQA, interleaved (Megatron groups)",   1, 7, 7, 8, 0,   4, 2,  2,  2, 6,  Packing::interleaved, true,  true,  true,  false, false, "",        0},
  {"Dqk != Dv",                            2, 5, 5, 6, 0,   2, 2,  4,  3, 5,  Packing::separate,    true,  true,  false, true,  false, "",        0},
  {"key padding (BidirectionalAttention)", 2, 6, 6, 8, 0,   2, 2,  4,  4, 8,  Packing::packed,      true,  true,  false, true,  true,  "padding", 0},
  {"key padding, cross (key_padding_mask)", 2, 4, 7, 8, 6,   2, 2,  4,  4, 6,  Packing::separate,    true,  true,  false, true,  false, "padding", 0},
  {"cross attention, separate",            2, 4, 7, 8, 6,   2, 2,  3,  4, 6,  Packing::separate,    false, true,  false, true,  true,  "",        0},
  {"cross attention, packed (nn.MHA)",     2, 4, 7, 8, 8,   2, 2,  4,  4, 8,  Packing::packed,      true,  true,  false, false, false, "attn",    0},
  {"causal cross, bottom-right",           1, 4, 7, 6, 5,   2, 1,  4,  4, 6,  Packing::separate,    true,  false, true,  true,  false, "",        0.2, Alignment::bottom_right},
  {"additive bias per head (ALiBi-like)",  2, 5, 5, 8, 0,   2, 2,  4,  4, 8,  Packing::packed,      true,  true,  true,  true,  false, "",        0,   Alignment::top_left, "bias"},
  {"key_lengths padding, softcap",         2, 6, 6, 8, 0,   2, 1,  4,  4, 6,  Packing::interleaved, true,  true,  false, true,  true,  "",        0,   Alignment::top_left, "lengths"},
};
// clang-format on

}  // namespace

ModuleInputs generate_module_inputs(const ModuleProblem& m, uint64_t seed) {
  ModuleInputs in = make_module_inputs(m);
  const Rng r(seed);
  fill(in.x, r.split(1), 1.0, true);
  if (in.x2) fill(*in.x2, r.split(2), 1.0, true);
  uint64_t s = 10;
  for (auto* w : {&in.wq, &in.wk, &in.wv, &in.wqkv, &in.bq, &in.bk, &in.bv, &in.bqkv}) fill_linear(*w, r.split(s++));
  fill(in.wo, r.split(20), 2.0 / std::sqrt(static_cast<double>(in.wo.shape[1])), false);
  if (in.bo) fill(*in.bo, r.split(21), 0.5, false);
  const Problem& p = m.attn;
  if (in.mask) {
    Tensor& t = *in.mask;
    Rng mr = r.split(30);
    for (int64_t b = 0; b < t.shape[0]; ++b)
      for (int64_t i = 0; i < t.shape[2]; ++i)
        for (int64_t j = 0; j < t.shape[3]; ++j) {
          const bool keep =
              is_key_padding(m) ? j < p.Lk - 2 * b - 1 : (j == std::min(i, p.Lk - 1) || mr.uniform() < 0.6);
          t.put(b, 0, i, j, keep ? 1 : 0);
        }
  }
  if (in.bias) fill(*in.bias, r.split(31), 2.0, false);
  if (in.keep) *in.keep = make_keep_mask(p);
  return in;
}

std::vector<ModuleFixture> module_suite() {
  std::vector<ModuleFixture> out;
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  for (uint64_t d = 0; d < 3; ++d)
    for (uint64_t k = 0; k < std::size(kCases); ++k) {
      const Case& c = kCases[k];
      const DType t = dtypes[d];
      const uint64_t seed = 3500 + 100 * d + k;  // a case keeps its seed when cases are added
      ModuleProblem m;
      Problem& p = m.attn;
      p.dtype = t;
      p.B = c.B, p.Lq = c.Lq, p.Lk = c.Lk, p.Hq = c.Hq, p.Hkv = c.Hkv, p.Dqk = c.Dqk, p.Dv = c.Dv;
      p.causal = c.causal, p.alignment = c.align, p.want_weights = c.weights;
      p.fully_masked = FullyMasked::zero;
      if (std::string(c.mask) == "padding") p.mask_shape = std::array<int64_t, 4>{c.B, 1, 1, c.Lk};
      if (std::string(c.mask) == "attn") p.mask_shape = std::array<int64_t, 4>{1, 1, c.Lq, c.Lk};
      if (c.dropout > 0) p.dropout_p = c.dropout, p.dropout_seed = seed;
      if (std::string(c.extra) == "bias") p.bias_shape = std::array<int64_t, 4>{1, c.Hq, c.Lq, c.Lk};
      if (std::string(c.extra) == "lengths") p.key_lengths = {c.Lk, c.Lk - 3}, p.softcap = 5.0;
      m.d_in = c.d_in, m.d_in2 = c.d_in2, m.d_out = c.d_out, m.packing = c.packing;
      m.qkv_bias = c.qkv_bias, m.out_bias = c.out_bias, m.average_weights = c.average;
      Provenance prov;
      prov.attncheck_version = attncheck_version();
      prov.seed = seed;
      prov.distribution = "normal";
      prov.command = std::string("attncheck generate-modules (") + c.what + ")";
      ModuleFixture f = make_module_fixture(m.name() + "/normal", m, generate_module_inputs(m, seed), prov);
      Tensor dy(t, {p.B, p.Lq, m.d_out});  // N(0, 1) from a stream of its own: the other draws keep their values
      fill(dy, Rng(seed).split(40), 1.0, true);
      add_module_gradients(f, std::move(dy));
      out.push_back(std::move(f));
    }
  return out;
}

}  // namespace attncheck
