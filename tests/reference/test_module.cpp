// The module level: hand-computed single- and multi-head layers (projections with biases, head split/merge, Wo),
// GQA, cross attention with Lq != Lk, packed Wqkv == separate Wq/Wk/Wv, the seeds' wrapper form == multi-head
// with the same weights split per head, and the module's shape errors.
#include <functional>

#include "attncheck/module.hpp"
#include "tiny.hpp"

using namespace attncheck;
using tiny::same_bits;

namespace {
Linear lin(int64_t in, int64_t out, std::vector<double> w, std::vector<double> b = {}) {
  return Linear{in, out, std::move(w), std::move(b)};
}

Linear random_lin(int64_t in, int64_t out, uint64_t seed, bool bias) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Linear l{in, out, std::vector<double>(static_cast<size_t>(in * out)), {}};
  for (double& x : l.w) x = u(rng);
  if (bias) {
    l.b.resize(static_cast<size_t>(out));
    for (double& x : l.b) x = u(rng);
  }
  return l;
}

Seq random_seq(int64_t B, int64_t L, int64_t E, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Seq s{B, L, E, std::vector<double>(static_cast<size_t>(B * L * E))};
  for (double& x : s.x) x = u(rng);
  return s;
}

// Columns [c0, c0 + n) of a linear layer, as a layer of its own (one head's slice of a fused projection).
Linear columns(const Linear& l, int64_t c0, int64_t n) {
  Linear r{l.in, n, std::vector<double>(static_cast<size_t>(l.in * n)), {}};
  for (int64_t e = 0; e < l.in; ++e)
    for (int64_t c = 0; c < n; ++c) r.w[static_cast<size_t>(e * n + c)] = l.w[static_cast<size_t>(e * l.out + c0 + c)];
  if (!l.b.empty()) r.b.assign(l.b.begin() + c0, l.b.begin() + c0 + n);
  return r;
}

Problem f64(int64_t B, int64_t Hq, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t Dqk, int64_t Dv) {
  Problem p;
  p.dtype = DType::f64;
  p.B = B, p.Hq = Hq, p.Hkv = Hkv, p.Lq = Lq, p.Lk = Lk, p.Dqk = Dqk, p.Dv = Dv;
  p.want_weights = p.want_lse = true;
  return p;
}

const Seq kEye{1, 2, 2, {1, 0, 0, 1}};  // two tokens, one-hot embeddings: x·W picks W's rows
}  // namespace

TEST(Module, SingleHeadByHand) {
  // q = x·[1;1] = 1, k = x·[0; log 3] = (0, log 3) -> weights (1/4, 3/4); v = x·[4; 8] + 1 = (5, 9) -> 8.
  // out = 8·[1, -1] + (0.5, 0) = (8.5, -8) for both tokens.
  const Problem p = f64(1, 1, 1, 2, 2, 1, 1);
  MhaWeights w;
  w.wq = lin(2, 1, {1, 1});
  w.wk = lin(2, 1, {0, std::log(3.0)});
  w.wv = lin(2, 1, {4, 8}, {1});
  w.wo = lin(1, 2, {1, -1}, {0.5, 0});
  const MhaResult r = reference_mha(p, w, kEye, nullptr);
  ASSERT_EQ(r.out.E, 2);
  for (int64_t t = 0; t < 2; ++t) {
    EXPECT_NEAR(r.merged.at(0, t, 0), 8.0, 1e-14);
    EXPECT_NEAR(r.out.at(0, t, 0), 8.5, 1e-14);
    EXPECT_NEAR(r.out.at(0, t, 1), -8.0, 1e-14);
  }
  EXPECT_NEAR(r.attn.weights[1], 0.75, 1e-15);
}

TEST(Module, ProjectionsAreStoredInTheProblemDtype) {
  // v = x·[1 + 2^-12; 3]: fp16 stores 1 + 2^-12 as 1, so with equal weights the fp16 problem gives exactly 2, the
  // fp64 one 2 + 2^-13.
  Problem p = f64(1, 1, 1, 2, 2, 1, 1);
  MhaWeights w;
  w.wq = lin(2, 1, {1, 1});
  w.wk = lin(2, 1, {0, 0});
  w.wv = lin(2, 1, {1 + std::ldexp(1.0, -12), 3});
  w.wo = lin(1, 1, {1});
  EXPECT_EQ(reference_mha(p, w, kEye, nullptr).out.x[0], 2 + std::ldexp(1.0, -13));
  p.dtype = DType::f16;
  EXPECT_EQ(reference_mha(p, w, kEye, nullptr).out.x[0], 2.0);
}

TEST(Module, TwoHeadsSplitAndMergeByHand) {
  // Columns are head-major: head 0 = column 0, head 1 = column 1.
  // head 0: k = (0, log 3) -> (1/4, 3/4), v = (4, 8) -> 7;  head 1: k = (log 2, 0) -> (2/3, 1/3), v = (3, -3) -> 1.
  // merged (7, 1); out = (7, 1)·[[1, 2], [3, 4]] = (10, 18).
  const Problem p = f64(1, 2, 2, 2, 2, 1, 1);
  MhaWeights w;
  w.wq = lin(2, 2, {1, 1, 1, 1});
  w.wk = lin(2, 2, {0, std::log(2.0), std::log(3.0), 0});
  w.wv = lin(2, 2, {4, 3, 8, -3});
  w.wo = lin(2, 2, {1, 2, 3, 4});
  const MhaResult r = reference_mha(p, w, kEye, nullptr);
  for (int64_t t = 0; t < 2; ++t) {
    EXPECT_NEAR(r.merged.at(0, t, 0), 7.0, 1e-14);
    EXPECT_NEAR(r.merged.at(0, t, 1), 1.0, 1e-14);
    EXPECT_NEAR(r.out.at(0, t, 0), 10.0, 1e-13);
    EXPECT_NEAR(r.out.at(0, t, 1), 18.0, 1e-13);
  }
}

TEST(Module, GqaSharesKvHeadsByHand) {
  // Hq=2, Hkv=1: query head 0 has q = 1, head 1 has q = 2 (scores doubled: weights ∝ a^2) over the same k, v.
  // head 0: (1/4, 3/4)·(5, 9) = 8;  head 1: (1/10, 9/10)·(5, 9) = 8.6.
  const Problem p = f64(1, 2, 1, 2, 2, 1, 1);
  MhaWeights w;
  w.wq = lin(2, 2, {1, 2, 1, 2});
  w.wk = lin(2, 1, {0, std::log(3.0)});
  w.wv = lin(2, 1, {5, 9});
  w.wo = lin(2, 2, {1, 0, 0, 1});
  const MhaResult r = reference_mha(p, w, kEye, nullptr);
  EXPECT_NEAR(r.out.at(0, 1, 0), 8.0, 1e-14);
  EXPECT_NEAR(r.out.at(0, 1, 1), 8.6, 1e-14);
}

TEST(Module, CrossAttentionByHand) {
  // One query token x_q = 2 (Eq = 1), two key/value tokens one-hot in Ekv = 2: q = 1, k = (0, log 3), v = (4, 8).
  const Problem p = f64(1, 1, 1, 1, 2, 1, 1);
  MhaWeights w;
  w.wq = lin(1, 1, {0.5});
  w.wk = lin(2, 1, {0, std::log(3.0)});
  w.wv = lin(2, 1, {4, 8});
  w.wo = lin(1, 1, {1});
  const Seq xq{1, 1, 1, {2}};
  EXPECT_NEAR(reference_mha(p, w, xq, &kEye).out.x[0], 7.0, 1e-14);
}

TEST(Module, CrossAttentionEqualsAttentionOnProjections) {
  // Lq != Lk both ways, different embedding sizes, causal bottom-right: the module must equal the attention on
  // q, k, v projected and split by this test's own loops.
  for (auto [Lq, Lk] : {std::pair<int64_t, int64_t>{3, 7}, {7, 3}}) {
    Problem p = f64(2, 4, 2, Lq, Lk, 3, 5);
    p.causal = true;
    p.alignment = Alignment::bottom_right;
    const Seq xq = random_seq(2, Lq, 6, 1), xkv = random_seq(2, Lk, 4, 2);
    MhaWeights w;
    w.wq = random_lin(6, 12, 3, true);
    w.wk = random_lin(4, 6, 4, true);
    w.wv = random_lin(4, 10, 5, false);
    w.wo = random_lin(20, 6, 6, true);
    const MhaResult r = reference_mha(p, w, xq, &xkv);

    Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
    auto project = [](const Seq& x, const Linear& l, int64_t H, int64_t D, Tensor& t) {
      for (int64_t b = 0; b < x.B; ++b)
        for (int64_t s = 0; s < x.L; ++s)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t d = 0; d < D; ++d) {
              double acc = l.b.empty() ? 0.0 : l.b[static_cast<size_t>(h * D + d)];
              for (int64_t e = 0; e < x.E; ++e) acc += x.at(b, s, e) * l.w[static_cast<size_t>(e * l.out + h * D + d)];
              t.put(b, h, s, d, acc);
            }
    };
    project(xq, *w.wq, 4, 3, in.q);
    project(xkv, *w.wk, 2, 3, in.k);
    project(xkv, *w.wv, 2, 5, in.v);
    const ReferenceResult a = reference_attention(p, in);
    EXPECT_TRUE(same_bits(a.out, r.attn.out)) << "Lq=" << Lq << " Lk=" << Lk;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t o = 0; o < 6; ++o) {
          double acc = w.wo.b[static_cast<size_t>(o)];
          for (int64_t h = 0; h < 4; ++h)
            for (int64_t d = 0; d < 5; ++d)
              acc += a.out[static_cast<size_t>(((b * 4 + h) * Lq + i) * 5 + d)] *
                     w.wo.w[static_cast<size_t>((h * 5 + d) * 6 + o)];
          EXPECT_NEAR(r.out.at(b, i, o), acc, 1e-13);
        }
  }
}

TEST(Module, PackedWqkvEqualsSeparate) {
  // GQA (Hq=4, Hkv=2), Dqk=3, Dv=2, with biases: wqkv = [wq | wk | wv] column blocks.
  Problem p = f64(2, 4, 2, 5, 5, 3, 2);
  p.causal = true;
  const Seq x = random_seq(2, 5, 8, 10);
  MhaWeights sep;
  sep.wq = random_lin(8, 12, 11, true);
  sep.wk = random_lin(8, 6, 12, true);
  sep.wv = random_lin(8, 4, 13, true);
  sep.wo = random_lin(8, 8, 14, true);
  Linear qkv{8, 22, std::vector<double>(8 * 22), {}};
  for (int64_t e = 0; e < 8; ++e)
    for (int64_t c = 0; c < 22; ++c) {
      const Linear& src = c < 12 ? *sep.wq : c < 18 ? *sep.wk : *sep.wv;
      const int64_t cc = c < 12 ? c : c < 18 ? c - 12 : c - 18;
      qkv.w[static_cast<size_t>(e * 22 + c)] = src.w[static_cast<size_t>(e * src.out + cc)];
    }
  for (const Linear* l : {&*sep.wq, &*sep.wk, &*sep.wv}) qkv.b.insert(qkv.b.end(), l->b.begin(), l->b.end());
  MhaWeights packed;
  packed.wqkv = qkv;
  packed.wo = sep.wo;
  const MhaResult a = reference_mha(p, sep, x, nullptr), b = reference_mha(p, packed, x, nullptr);
  EXPECT_TRUE(same_bits(a.out.x, b.out.x));
  EXPECT_TRUE(same_bits(a.attn.weights, b.attn.weights));
  EXPECT_TRUE(same_bits(a.attn.lse, b.attn.lse));
}

TEST(Module, WrapperEqualsMultiHeadWithTheSameWeights) {
  // H=3 independent heads (the seeds' MultiHeadAttentionWrapper) == one multi-head layer whose fused projections
  // are the heads' projections side by side; with a per-head mask, dropout and an output projection.
  const int64_t H = 3, Dqk = 2, Dv = 3, L = 6, E = 5;
  Problem p = f64(2, H, H, L, L, Dqk, Dv);
  p.causal = true;
  p.mask_shape = std::array<int64_t, 4>{1, H, L, L};
  p.dropout_p = 0.25;
  p.dropout_seed = 5;
  AttentionExtras ex;
  ex.mask = Tensor(DType::u8, {1, H, L, L});
  std::mt19937_64 rng(20);
  for (int64_t n = 0; n < ex.mask->numel(); ++n) ex.mask->set_offset(n, rng() % 4 != 0);
  ex.keep = make_keep_mask(p);
  MhaWeights w;
  w.wq = random_lin(E, H * Dqk, 21, false);
  w.wk = random_lin(E, H * Dqk, 22, false);
  w.wv = random_lin(E, H * Dv, 23, false);
  w.wo = random_lin(H * Dv, E, 24, true);
  std::vector<HeadWeights> heads;
  for (int64_t h = 0; h < H; ++h)
    heads.push_back({columns(*w.wq, h * Dqk, Dqk), columns(*w.wk, h * Dqk, Dqk), columns(*w.wv, h * Dv, Dv)});
  const Seq x = random_seq(2, L, E, 25);
  const MhaResult m = reference_mha(p, w, x, nullptr, ex), r = reference_wrapper(p, heads, &w.wo, x, nullptr, ex);
  EXPECT_TRUE(same_bits(m.attn.out, r.attn.out));
  EXPECT_TRUE(same_bits(m.attn.weights, r.attn.weights));
  EXPECT_TRUE(same_bits(m.attn.lse, r.attn.lse));
  EXPECT_TRUE(same_bits(m.merged.x, r.merged.x));
  EXPECT_TRUE(same_bits(m.out.x, r.out.x));
  // Without wo the wrapper returns the concatenation itself, [B, L, H*Dv].
  const MhaResult c = reference_wrapper(p, heads, nullptr, x, nullptr, ex);
  EXPECT_EQ(c.out.E, H * Dv);
  EXPECT_TRUE(same_bits(c.out.x, m.merged.x));
}

TEST(Module, ShapeErrorsNameFieldAndValues) {
  auto expect_invalid = [](const std::function<void()>& f, std::initializer_list<std::string> needles) {
    try {
      f();
      ADD_FAILURE() << "no exception";
    } catch (const std::invalid_argument& e) {
      for (const std::string& n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
    }
  };
  const Problem p = f64(1, 2, 2, 2, 2, 1, 1);
  MhaWeights w;
  w.wq = lin(2, 2, {1, 1, 1, 1});
  w.wk = lin(2, 2, {1, 1, 1, 1});
  w.wv = lin(2, 2, {1, 1, 1, 1});
  w.wo = lin(2, 2, {1, 0, 0, 1});
  EXPECT_NO_THROW(reference_mha(p, w, kEye, nullptr));
  expect_invalid(
      [&] {
        reference_mha(p, w, Seq{1, 3, 2, std::vector<double>(6)}, nullptr);
      },
      {"x_q", "[1,3,2]", "Lq=2"});
  expect_invalid(
      [&] {
        reference_mha(p, w, Seq{1, 2, 2, std::vector<double>(3)}, nullptr);
      },
      {"x_q holds 3", "expected B*L*E=4"});
  const Seq kv3{1, 3, 2, std::vector<double>(6)};
  expect_invalid([&] { reference_mha(p, w, kEye, &kv3); }, {"x_kv", "[1,3,2]", "Lk=2"});
  MhaWeights bad = w;
  bad.wk = lin(2, 3, std::vector<double>(6));
  expect_invalid([&] { reference_mha(p, bad, kEye, nullptr); }, {"wk", "[2,2]", "[2,3]"});
  bad = w;
  bad.wv->b = {1, 2, 3};
  expect_invalid([&] { reference_mha(p, bad, kEye, nullptr); }, {"wv.b holds 3", "out=2"});
  bad = w;
  bad.wo = lin(3, 2, std::vector<double>(6));
  expect_invalid([&] { reference_mha(p, bad, kEye, nullptr); }, {"wo", "[2,2]", "[3,2]"});
  bad = w;
  bad.wq->w.pop_back();
  expect_invalid([&] { reference_mha(p, bad, kEye, nullptr); }, {"wq.w holds 3", "in*out=4"});
  bad = w;
  bad.wqkv = lin(2, 6, std::vector<double>(12));
  expect_invalid([&] { reference_mha(p, bad, kEye, nullptr); }, {"wqkv", "not both"});
  bad.wq.reset(), bad.wk.reset(), bad.wv.reset();
  expect_invalid([&] { reference_mha(p, bad, kEye, &kEye); }, {"wqkv", "self attention only"});
  bad.wqkv = lin(2, 5, std::vector<double>(10));
  expect_invalid([&] { reference_mha(p, bad, kEye, nullptr); }, {"wqkv", "[2,6]", "[2,5]"});
  bad = w;
  bad.wv.reset();
  expect_invalid([&] { reference_mha(p, bad, kEye, nullptr); }, {"wq, wk and wv"});
  Problem cross = p;
  cross.Lk = 3;
  expect_invalid([&] { reference_mha(cross, w, kEye, nullptr); }, {"Lk == Lq", "Lq=2", "Lk=3"});
  std::vector<HeadWeights> one{{lin(2, 1, {1, 1}), lin(2, 1, {1, 1}), lin(2, 1, {1, 1})}};
  expect_invalid([&] { reference_wrapper(p, one, nullptr, kEye, nullptr); }, {"number of heads 1", "Hq=2", "Hkv=2"});
  one.push_back({lin(2, 1, {1, 1}), lin(2, 2, {1, 1, 1, 1}), lin(2, 1, {1, 1})});
  expect_invalid([&] { reference_wrapper(p, one, nullptr, kEye, nullptr); }, {"heads[1].wk", "[2,1]", "[2,2]"});
  Problem bad_p = p;
  bad_p.Hkv = 3;
  expect_invalid([&] { reference_mha(bad_p, w, kEye, nullptr); }, {"Hq=2", "Hkv=3"});
}
