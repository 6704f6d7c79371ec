// The modification library (mods.hpp): every mask modification equals the dense boolean mask written out here
// from its definition (bit for bit, reference, cpu and cpu-flash), ALiBi and the T5 bias equal their bias
// tensors, T5 buckets match transformers' formula at listed distances, cpu and cpu-flash match the reference on
// each entry, validation names the field, names round-trip, a backend that does not declare a modification is
// never offered it, and a score expression's derivative is refused where it has none.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <variant>

#include "attncheck/backward.hpp"
#include "attncheck/features.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/reference.hpp"
#include "impl_check.hpp"

namespace attncheck {
namespace {

// A shape of each kind: self attention, Lq < Lk (decode-like) and Lq > Lk, in every alignment.
std::vector<Problem> shapes() {
  std::vector<Problem> out;
  const int64_t lqk[][2] = {{33, 33}, {7, 70}, {40, 23}};
  int n = 0;
  for (const auto& s : lqk)
    for (Alignment a : {Alignment::top_left, Alignment::bottom_right, Alignment::explicit_}) {
      Problem p;
      p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = s[0], p.Lk = s[1], p.Dqk = p.Dv = 8;
      p.alignment = a, p.causal_offset = a == Alignment::explicit_ ? 5 : 0;
      p.key_lengths = {p.Lk, p.Lk - 3};
      p.causal = ++n % 2 == 0;
      p.want_lse = p.want_weights = true;
      out.push_back(p);
    }
  return out;
}

int64_t floor_div(int64_t a, int64_t c) { return static_cast<int64_t>(std::floor(double(a) / double(c))); }

// Each mask entry's definition, written out independently of the library: whether query i of batch b (key
// position pos) sees key j.
bool dense_visible(const std::string& name, const Problem& p, int64_t b, int64_t h, int64_t i, int64_t pos, int64_t j) {
  if (name == "document") {
    if (pos < 0 || pos >= p.Lk) return false;
    return p.doc_ids[size_t(b * p.Lk + pos)] == p.doc_ids[size_t(b * p.Lk + j)];
  }
  if (name == "chunked") return floor_div(pos, p.chunk_size) == floor_div(j, p.chunk_size);
  if (name == "prefix_lm") return j < p.prefix_lengths[size_t(b)] || j <= pos;
  if (name == "dilated_window") {
    const int64_t d = pos - j;
    return std::abs(d) <= p.dilated_window * p.dilation && d % p.dilation == 0;
  }
  if (name == "mask_expr") {  // what the entry's draw writes (checked here, so a changed draw fails loudly)
    EXPECT_EQ(p.mask_expr, "kv_idx <= q_pos && kv_idx >= q_pos - width[b, h]");
    return j <= pos && j >= pos - static_cast<int64_t>(p.expr_values[size_t(b * p.Hq + h)]);
  }
  if (name == "topk") {
    for (int64_t s = 0; s < p.topk; ++s)
      if (p.topk_indices[size_t((b * p.Lq + i) * p.topk + s)] == j) return true;
    return false;
  }
  ADD_FAILURE() << "no dense definition for " << name;
  return true;
}

// The same problem with the modification replaced by a dense [B, Hq, Lq, Lk] boolean mask.
std::pair<Problem, Inputs> as_dense_mask(const std::string& name, Problem p, Inputs in) {
  const Problem modded = p;
  p.doc_ids.clear(), p.chunk_size = 0, p.prefix_lengths.clear(), p.dilated_window = -1, p.dilation = 1;
  p.mask_expr.clear(), p.expr_tensors.clear(), p.expr_values.clear();
  p.topk = 0, p.topk_indices.clear();
  p.mask_shape = std::array<int64_t, 4>{p.B, p.Hq, p.Lq, p.Lk};
  in.mask = Tensor(DType::u8, {p.B, p.Hq, p.Lq, p.Lk});
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t j = 0; j < p.Lk; ++j)
          in.mask->put(b, h, i, j, dense_visible(name, modded, b, h, i, i + p.diagonal_offset(b), j) ? 1.0 : 0.0);
  return {p, in};
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.bytes == b.bytes; }

Outputs run(const char* impl, const Problem& p, const Inputs& in) {
  Outputs out;
  const Support s = run_impl(*find_impl(impl), p, in, out);
  EXPECT_TRUE(s.ok) << impl << " " << p.name() << ": " << s.reason;
  return out;
}

TEST(Mods, MaskModEqualsItsDenseMaskBitForBit) {
  int cases = 0, hidden = 0;
  for (const ModEntry& m : modifications()) {
    if (m.kind != ModKind::mask) continue;
    uint64_t seed = 1;
    for (Problem p : shapes()) {
      Rng rng(++seed * 977 + std::strlen(m.name));
      m.draw(p, rng);
      ASSERT_NO_THROW(validate(p)) << p.name();
      const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, seed);
      const auto [dp, din] = as_dense_mask(m.name, p, in);
      for (int64_t n = 0; n < din.mask->numel(); ++n) hidden += din.mask->get_offset(n) == 0;
      const ReferenceResult a = reference_attention(p, in), b = reference_attention(dp, din);
      EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(double))) << m.name << " " << p.name();
      EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(double))) << m.name << " " << p.name();
      for (const char* impl : {"cpu", "cpu-flash"}) {
        const Outputs x = run(impl, p, in), y = run(impl, dp, din);
        EXPECT_TRUE(same_bits(x.out, y.out) && same_bits(*x.lse, *y.lse) && same_bits(*x.weights, *y.weights))
            << impl << " " << m.name << " " << p.name();
      }
      ++cases;
    }
  }
  EXPECT_EQ(cases, 6 * 9);
  EXPECT_GT(hidden, 0) << "the drawn masks hide keys";
}

// The additive bias a score entry stands for, written out here: ALiBi from FlashAttention's documented formula,
// T5 through the bucket table below.
TEST(Mods, AlibiEqualsItsBiasTensorBitForBit) {
  for (Problem p : shapes()) {
    for (bool per_batch : {false, true}) {
      p.alibi_slopes.clear();
      for (int64_t n = 0; n < (per_batch ? p.B : 1) * p.Hq; ++n)
        p.alibi_slopes.push_back(std::ldexp(1.0, -int(n) - 1) * 1.5);
      const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 3);
      Problem q = p;
      q.alibi_slopes.clear();
      q.bias_shape = std::array<int64_t, 4>{p.B, p.Hq, p.Lq, p.Lk}, q.bias_dtype = DType::f64;
      Inputs qin = in;
      qin.bias = Tensor(DType::f64, {p.B, p.Hq, p.Lq, p.Lk});
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hq; ++h)
          for (int64_t i = 0; i < p.Lq; ++i)
            for (int64_t j = 0; j < p.Lk; ++j) {
              const double slope = p.alibi_slopes[size_t(per_batch ? b * p.Hq + h : h)];
              qin.bias->put(b, h, i, j, -slope * std::abs(double(i + p.diagonal_offset(b) - j)));
            }
      const ReferenceResult a = reference_attention(p, in), b = reference_attention(q, qin);
      EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(double))) << p.name();
      EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(double))) << p.name();
    }
  }
}

// The per-key bias is the bias tensor [B, Hq, Lq, Lk] whose every query row is key_bias[b, h, :].
TEST(Mods, KeyBiasEqualsItsBiasTensorBitForBit) {
  for (Problem p : shapes()) {
    for (bool per_batch : {false, true}) {
      p.key_bias.clear();
      for (int64_t n = 0; n < (per_batch ? p.B : 1) * p.Hq * p.Lk; ++n)
        p.key_bias.push_back(std::ldexp(double(n % 17) - 8.0, -3));
      const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
      Problem q = p;
      q.key_bias.clear();
      q.bias_shape = std::array<int64_t, 4>{p.B, p.Hq, p.Lq, p.Lk}, q.bias_dtype = DType::f64;
      Inputs qin = in;
      qin.bias = Tensor(DType::f64, {p.B, p.Hq, p.Lq, p.Lk});
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hq; ++h)
          for (int64_t i = 0; i < p.Lq; ++i)
            for (int64_t j = 0; j < p.Lk; ++j)
              qin.bias->put(b, h, i, j, p.key_bias[size_t(((per_batch ? b * p.Hq : 0) + h) * p.Lk + j)]);
      const ReferenceResult a = reference_attention(p, in), b = reference_attention(q, qin);
      EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(double))) << p.name();
      EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(double))) << p.name();
      EXPECT_NE(p.short_name().find("kbias"), std::string::npos) << p.short_name();
    }
  }
}

// transformers' T5Attention._relative_position_bucket(j - pos, bidirectional, 32, 128), evaluated with Python at
// these distances (the float32 and double forms agree at every one of them).
TEST(Mods, T5BucketsMatchTransformers) {
  const int64_t rel[] = {-300, -128, -100, -37, -20, -9, -8, -7, -1, 0, 1, 5, 8, 9, 15, 16, 31, 64, 127, 128, 1000};
  const int64_t bi[] = {15, 15, 15, 12, 10, 8, 8, 7, 1, 0, 17, 21, 24, 24, 25, 26, 27, 30, 31, 31, 31};
  const int64_t uni[] = {31, 31, 30, 22, 17, 9, 8, 7, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (bool bidirectional : {true, false}) {
    Problem p;
    p.Lq = 1, p.Lk = 2000, p.Hq = 1, p.dtype = DType::f64;
    p.t5_buckets = 32, p.t5_max_distance = 128, p.t5_bidirectional = bidirectional;
    for (int64_t n = 0; n < 32; ++n) p.t5_table.push_back(double(n));  // the bias is the bucket
    const ModSet mods(p);
    for (size_t k = 0; k < std::size(rel); ++k) {
      const int64_t pos = 1000;  // rel = j - pos
      EXPECT_EQ(mods.score(ModAt{0, 0, 0, pos, pos + rel[k]}, 0.0), double(bidirectional ? bi[k] : uni[k]))
          << "bidirectional " << bidirectional << " rel " << rel[k];
    }
  }
}

TEST(Mods, CpuImplsMatchReferenceOnEveryEntry) {
  std::vector<Problem> problems;
  for (const ModEntry& m : modifications()) {
    uint64_t seed = 40;
    for (Problem p : shapes()) {
      if (++seed % 3) continue;  // three shapes per entry
      Rng rng(seed);
      m.draw(p, rng);
      problems.push_back(p);
    }
  }
  expect_impls_match_reference(problems, [](Problem p) {  // every modification off: the same outputs must fail
    const Problem d;
    p.alibi_slopes = d.alibi_slopes, p.t5_table = d.t5_table, p.t5_buckets = d.t5_buckets, p.key_bias = d.key_bias;
    p.doc_ids = d.doc_ids, p.chunk_size = d.chunk_size, p.prefix_lengths = d.prefix_lengths;
    p.dilated_window = d.dilated_window, p.dilation = d.dilation, p.rotary_dim = d.rotary_dim;
    p.score_expr = d.score_expr, p.mask_expr = d.mask_expr, p.expr_tensors = d.expr_tensors,
    p.expr_values = d.expr_values;
    p.topk = d.topk, p.topk_indices = d.topk_indices, p.q_norm_weight = d.q_norm_weight,
    p.k_norm_weight = d.k_norm_weight;
    EXPECT_FALSE(uses_modifications(p));
    return p;
  });
}

TEST(Mods, ValidationNamesTheField) {
  Problem p;
  p.B = 2, p.Hq = 3, p.Lk = 10, p.Lq = 4;
  auto msg = [&](const std::function<void(Problem&)>& f) {
    Problem q = p;
    f(q);
    return validation_message(q);
  };
  EXPECT_NE(msg([](Problem& q) {
              q.alibi_slopes = {1, 2};
            }).find("alibi_slopes must have Hq=3 or B*Hq=6 entries, got 2"),
            std::string::npos);
  EXPECT_NE(msg([](Problem& q) {
              q.alibi_slopes = {0.1, 1, 1};
            }).find("alibi_slopes must be finite values exact in fp32"),
            std::string::npos);
  EXPECT_NE(msg([](Problem& q) {
              q.doc_ids = {0, 1};
            }).find("doc_ids must have B*Lk=20 entries, got 2"),
            std::string::npos);
  EXPECT_NE(msg([](Problem& q) {
              q.prefix_lengths = {3, 11};
            }).find("prefix_lengths must be in [0, Lk=10]"),
            std::string::npos);
  EXPECT_NE(msg([](Problem& q) { q.chunk_size = -2; }).find("chunk_size must be in [0, 2^60]"), std::string::npos);
  EXPECT_NE(
      msg([](Problem& q) { q.dilation = 2; }).find("dilation must be in [1, 2^30], and 1 without a dilated_window"),
      std::string::npos);
  EXPECT_NE(msg([](Problem& q) { q.t5_buckets = 8; }).find("t5_table must have Hq*t5_buckets=24 entries, got 0"),
            std::string::npos);
  EXPECT_NE(msg([](Problem& q) {
              q.t5_buckets = 8, q.t5_table.assign(24, 0.0), q.t5_max_distance = 2;
            }).find("t5_max_distance must be > 2"),
            std::string::npos);
  EXPECT_NE(msg([](Problem& q) {
              q.B = 1, q.chunk_size = 4, q.cu_seqlens_q = {0, 4}, q.cu_seqlens_k = {0, 10};
            }).find("chunk_size: modifications with packed sequences"),
            std::string::npos);
  EXPECT_NE(msg([](Problem& q) {
              q.key_bias.assign(7, 0.0);
            }).find("key_bias must have Hq*Lk=30 or B*Hq*Lk=60 entries, got 7"),
            std::string::npos);
  EXPECT_NE(msg([](Problem& q) { q.key_bias.assign(30, 0.0), q.key_bias[4] = NAN; }).find("key_bias must be finite"),
            std::string::npos);
  EXPECT_EQ(msg([](Problem& q) { q.chunk_size = 4, q.doc_ids.assign(20, 1); }), "accepted");
}

TEST(Mods, NamesRoundTripAndMarkShortNames) {
  for (const ModEntry& m : modifications()) {
    Problem p = shapes()[4];
    Rng rng(7);
    m.draw(p, rng);
    const Problem q = parse_name(p.name());
    for (const Field& f : problem_fields()) EXPECT_TRUE(field_equal(p, q, f)) << m.name << " " << f.key;
    EXPECT_NE(p.short_name().find(m.marker), std::string::npos) << p.short_name();
  }
}

TEST(Mods, UndeclaredModificationIsUnsupported) {
  Problem p = shapes()[0];
  p.chunk_size = 8;
  Capabilities c;  // the default: no modification declared (plugins, workers that predate the library)
  EXPECT_EQ(check_capabilities(c, p).reason, "modification chunked not supported");
  c.mods = {"chunked"};
  EXPECT_TRUE(check_capabilities(c, p).ok);
  p.alibi_slopes.assign(size_t(p.Hq), 0.5);
  EXPECT_EQ(check_capabilities(c, p).reason, "modification alibi not supported");
  EXPECT_TRUE(backward_modelled(p).ok);  // the reference has their gradients
}

// ---- expressions (mods_expr.cpp) -------------------------------------------------------------------------------

// An expression written as a library entry gives the entry's bits: ALiBi as a score expression (same fp64
// operations) and the document mask as a mask expression, on the reference, cpu and cpu-flash.
TEST(ModsExpr, ExpressionsEqualTheLibraryEntriesBitForBit) {
  for (Problem p : shapes()) {
    Problem lib = p, ex = p;
    for (int64_t h = 0; h < p.Hq; ++h) lib.alibi_slopes.push_back(std::ldexp(1.0, -int(h) - 1));
    ex.score_expr = "score - slopes[h] * abs(q_pos - kv_idx)";
    ex.expr_tensors =
        "slopes[" + std::to_string(p.Hq) + "];doc[" + std::to_string(p.B) + "," + std::to_string(p.Lk) + "]";
    ex.expr_values = lib.alibi_slopes;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t j = 0; j < p.Lk; ++j) lib.doc_ids.push_back(j / 5 + b), ex.expr_values.push_back(double(j / 5 + b));
    // the query's document only where q_pos is a key position (muparser's ?: evaluates one branch)
    ex.mask_expr = "q_pos >= 0 && q_pos < " + std::to_string(p.Lk) + " ? doc[b, q_pos] == doc[b, kv_idx] : 0";
    ASSERT_NO_THROW(validate(ex)) << validation_message(ex);
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 11);
    const ReferenceResult a = reference_attention(lib, in), b = reference_attention(ex, in);
    EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(double))) << p.name();
    EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(double))) << p.name();
    for (const char* impl : {"cpu", "cpu-flash"}) {
      const Outputs x = run(impl, lib, in), y = run(impl, ex, in);
      EXPECT_TRUE(same_bits(x.out, y.out) && same_bits(*x.lse, *y.lse)) << impl << " " << p.name();
    }
  }
}

std::string expr_error(const std::function<void(Problem&)>& f) {
  Problem p;
  p.B = 2, p.Hq = 3, p.Hkv = 3, p.Lq = 4, p.Lk = 10;
  p.expr_tensors = "slopes[3]", p.expr_values = {0.5, 0.25, 0.125};
  f(p);
  return validation_message(p);
}

TEST(ModsExpr, ErrorsNameTheExpressionAndThePosition) {
  const std::string bad_syntax = expr_error([](Problem& p) { p.score_expr = "score + (slopes[h] *"; });
  EXPECT_NE(bad_syntax.find("score_expr 'score + (slopes[h] *'"), std::string::npos) << bad_syntax;
  EXPECT_NE(bad_syntax.find("position 8"), std::string::npos) << bad_syntax;
  const std::string unknown = expr_error([](Problem& p) { p.score_expr = "score + slope * h"; });
  EXPECT_NE(unknown.find("Unexpected token \"slope\" found at position 8"), std::string::npos) << unknown;
  const std::string not_tensor = expr_error([](Problem& p) { p.score_expr = "score + slop[h]"; });
  EXPECT_NE(
      not_tensor.find(
          "'[' at position 12 follows 'slop', which is not an auxiliary tensor (declared in expr_tensors: slopes)"),
      std::string::npos)
      << not_tensor;
  const std::string no_score = expr_error([](Problem& p) { p.mask_expr = "score > 0"; });
  EXPECT_NE(no_score.find("mask_expr 'score > 0': Unexpected token \"score\" found at position 0"), std::string::npos)
      << no_score;
  const std::string range = expr_error([](Problem& p) { p.score_expr = "score + slopes[h + 1]"; });
  EXPECT_NE(range.find(
                "score_expr 'score + slopes[h + 1]' (slopes[ at position 8): index 3 of slopes (dimension 0) is not an "
                "integer in [0, 3) at b=0, h=2, q_idx=0, kv_idx=0"),
            std::string::npos)
      << range;
  const std::string half = expr_error([](Problem& p) { p.mask_expr = "slopes[kv_idx / 4] > 0"; });
  EXPECT_NE(half.find("index 0.25 of slopes"), std::string::npos) << half;
  const std::string nan_mask = expr_error([](Problem& p) { p.mask_expr = "sqrt(kv_idx - 5)"; });
  EXPECT_NE(nan_mask.find("mask_expr 'sqrt(kv_idx - 5)': non-finite result "), std::string::npos) << nan_mask;
  EXPECT_NE(nan_mask.find(" at b=0, h=0, q_idx=0, kv_idx=0"), std::string::npos) << nan_mask;
  const std::string decl = expr_error([](Problem& p) { p.score_expr = "score", p.expr_tensors = "slopes[4]"; });
  EXPECT_NE(decl.find("expr_values must have 4 entries"), std::string::npos) << decl;
  const std::string orphan = expr_error([](Problem&) {});
  EXPECT_NE(orphan.find("expr_tensors must be empty without score_expr or mask_expr"), std::string::npos) << orphan;
  EXPECT_EQ(expr_error([](Problem& p) { p.score_expr = "score + slopes[h] * (kv_idx - q_pos)"; }), "accepted");
}

// A score expression that is not finite on a visible key stops the reference and the CPU kernels with an error
// naming it; the same expression on keys that only hidden ones make non-finite is fine.
// The backward needs d score_expr / d score: where the expression has a kink at a visible key's score, the
// reference and cpu refuse the case naming the expression and the point instead of guessing a derivative; the same
// kink away from every score is differentiated (d |score - 100| / d score = -1 at score 0).
TEST(ModsExpr, BackwardRefusesAScoreWhereTheExpressionIsNotDifferentiable) {
  Problem p = shapes()[0];
  p.score_expr = "abs(score)";
  Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
  for (int64_t n = 0; n < in.q.numel(); ++n) in.q.set_offset(n, 0.0);  // every score exactly 0, the kink
  Tensor dout = make_dout(p);
  for (int64_t n = 0; n < dout.numel(); ++n) dout.set_offset(n, 1.0);
  try {
    (void)reference_backward(p, in, dout);
    ADD_FAILURE() << "reference_backward differentiated abs(score) at 0";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("score_expr 'abs(score)': not differentiable in score at b="),
              std::string::npos)
        << e.what();
  }
  Gradients g = make_gradients(p);
  EXPECT_THROW((void)run_backward_impl(*find_impl("cpu"), p, in, dout, g), std::invalid_argument);
  p.score_expr = "abs(score - 100)";
  EXPECT_NO_THROW((void)reference_backward(p, in, dout));
  EXPECT_EQ(ModSet(p).derivative(ModAt{0, 0, 0, 0, 0}, 0.0), -1.0);
}

TEST(ModsExpr, NonFiniteScoreOnAVisibleKeyIsAnError) {
  Problem p = shapes()[0];
  p.causal = true, p.alignment = Alignment::top_left, p.key_lengths.clear();
  // -inf where kv_idx = q_pos - 1 (visible under causal) and finite on every other key, so whichever row a thread
  // reaches first, the error names -inf (log of a negative argument would make some rows NaN instead).
  p.score_expr = "score + log(abs(kv_idx - q_pos + 1))";
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
  try {
    (void)reference_attention(p, in);
    ADD_FAILURE() << "reference accepted a -inf score";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("score modification score_expr gives the non-finite score -inf"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("(score_expr 'score + log(abs(kv_idx - q_pos + 1))')"), std::string::npos)
        << e.what();
  }
  for (const char* impl : {"cpu", "cpu-flash"}) {
    Outputs out;
    EXPECT_THROW((void)run_impl(*find_impl(impl), p, in, out), std::invalid_argument) << impl;
  }
  p.score_expr = "score + log(q_pos - kv_idx + 1)";  // -inf only at kv_idx = q_pos + 1: hidden by causal
  EXPECT_NO_THROW((void)reference_attention(p, in));
  Outputs out;
  EXPECT_TRUE(run_impl(*find_impl("cpu"), p, in, out).ok);
}

// What the code that iterates the logit stage reads from each entry: one double parameter, examples that validate
// and turn the entry on, its evaluations (fp64 and as an fp32 kernel) and its tolerance facts.
TEST(LogitEntries, GiveWhatTheGenericCodeReads) {
  for (const ModEntry& m : logit_modifications()) {
    EXPECT_EQ(m.kind, ModKind::logit) << m.name;
    ASSERT_EQ(m.fields.size(), 1u) << m.name;
    EXPECT_TRUE(std::holds_alternative<double Problem::*>(m.fields[0].ref)) << m.name;
    ASSERT_FALSE(m.examples.empty()) << m.name;
    ASSERT_TRUE(m.score && m.dscore && m.score_f32 && m.abs_error && m.dscore_error) << m.name;
    EXPECT_GT(m.rounding, 0) << m.name;
    EXPECT_GT(m.dscore_abs, 0) << m.name;
    for (double v : m.examples) {
      Problem p;
      set_logit_parameter(p, m, v);
      EXPECT_EQ(logit_parameter(p, m), v) << m.name;
      EXPECT_NO_THROW(validate(p)) << m.name << " " << v;
      EXPECT_TRUE(m.used(p)) << m.name << " " << v;
      const ModAt at{0, 0, 0, 0, 0};
      for (double s : {-400.0, -3.0, 0.0, 0.7, 12.0}) {  // the fp32 evaluation within the entry's rounding
        const double exact = m.score(p, at, s), f32 = m.score_f32(p, at, static_cast<float>(s));
        EXPECT_LE(std::abs(f32 - exact), (m.rounding + 2) * 0x1p-24 * m.abs_error(p)) << m.name << " at " << s;
      }
    }
  }
}

// The kernels evaluate the logit stage's one entry by hand, and plugin ABI 1 carries it as a field and a flag: a
// second entry needs them extended (docs/problem-model.md "The logit stage") before this test may change.
TEST(LogitEntries, OnlySoftcapUntilTheKernelsAndTheAbiCarryAnother) {
  ASSERT_EQ(logit_modifications().size(), 1u)
      << "extend impls/cpu/cpu_common.hpp (Scorer), impls/cuda/kernels/attn_common.cuh (logit_stage) and "
         "impls/cuda/host_plan.cpp, and impls/plugin.cpp (to_abi, convert) for the new logit-stage entry";
  EXPECT_STREQ(logit_modifications()[0].name, "softcap");
}

}  // namespace
}  // namespace attncheck
