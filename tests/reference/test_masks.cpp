// Hand-computed tiny cases for every mask kind: causal in each alignment (Lq < Lk and Lq > Lk), explicit and
// per-batch offsets, key padding, boolean mask and additive bias with broadcasting, sliding windows and softcap.
// Each visibility table below was worked out by hand from the rule "key j visible to query i iff j <= i + offset".
#include "tiny.hpp"

using namespace attncheck;
using namespace tiny;

namespace {
const std::vector<double> kA = {1, 2, 3, 4, 5};         // key j has score log(a_j): weights a_j / sum
const std::vector<double> kV = {10, -20, 30, -40, 50};  // signed values

// Check every row of a B=1, H=1 scalar problem against a hand-written visibility table.
void expect_table(const Problem& p, const std::vector<std::vector<int>>& vis, const std::string& what) {
  const std::vector<double> a(kA.begin(), kA.begin() + p.Lk), v(kV.begin(), kV.begin() + p.Lk);
  const ReferenceResult r = reference_attention(p, scalar_inputs(p, a, v));
  for (int64_t i = 0; i < p.Lq; ++i) {
    const auto& row = vis[static_cast<size_t>(i)];
    bool any = false;
    for (int x : row) any = any || x;
    if (any) {
      expect_row(r, p, i, ratio_weights(a, row), v, what);
      double s = 0;
      for (int64_t j = 0; j < p.Lk; ++j) s += row[static_cast<size_t>(j)] ? a[static_cast<size_t>(j)] : 0;
      EXPECT_NEAR(r.lse[static_cast<size_t>(i)], std::log(s), 1e-14) << what << " lse row " << i;
    } else {  // fully masked, default policy zero: out 0, weights 0, lse -inf
      EXPECT_EQ(r.out[static_cast<size_t>(i)], 0.0) << what << " row " << i;
      for (int64_t j = 0; j < p.Lk; ++j) EXPECT_EQ(r.weights[static_cast<size_t>(i * p.Lk + j)], 0.0);
      EXPECT_EQ(r.lse[static_cast<size_t>(i)], -INFINITY) << what << " row " << i;
    }
  }
}

Problem causal(int64_t Lq, int64_t Lk, Alignment al, int64_t offset = 0) {
  Problem p = scalar_problem(1, 1, 1, Lq, Lk);
  p.causal = true;
  p.alignment = al;
  p.causal_offset = offset;
  return p;
}
}  // namespace

TEST(Masks, NoMaskIsPlainSoftmax) {
  // weights 1/15 .. 5/15; out = (10 - 40 + 90 - 160 + 250) / 15 = 150/15 = 10
  const Problem p = scalar_problem(1, 1, 1, 1, 5);
  const ReferenceResult r = reference_attention(p, scalar_inputs(p, kA, kV));
  EXPECT_NEAR(r.out[0], 10.0, 1e-13);
  EXPECT_NEAR(r.weights[4], 5.0 / 15.0, 1e-15);
  EXPECT_NEAR(r.lse[0], std::log(15.0), 1e-15);
}

TEST(Masks, CausalTopLeftShortQuery) {  // Lq=3 < Lk=5, offset 0
  expect_table(causal(3, 5, Alignment::top_left), {{1, 0, 0, 0, 0}, {1, 1, 0, 0, 0}, {1, 1, 1, 0, 0}}, "tl");
}

TEST(Masks, CausalBottomRightShortQuery) {  // offset Lk - Lq = 2
  expect_table(causal(3, 5, Alignment::bottom_right), {{1, 1, 1, 0, 0}, {1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}}, "br");
}

TEST(Masks, CausalTopLeftLongQuery) {  // Lq=5 > Lk=3: rows past Lk see every key
  expect_table(causal(5, 3, Alignment::top_left), {{1, 0, 0}, {1, 1, 0}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}, "tl");
}

TEST(Masks, CausalBottomRightLongQuery) {  // offset 3 - 5 = -2: the first two rows see nothing
  expect_table(causal(5, 3, Alignment::bottom_right), {{0, 0, 0}, {0, 0, 0}, {1, 0, 0}, {1, 1, 0}, {1, 1, 1}}, "br");
}

TEST(Masks, CausalExplicitOffset) {
  // KV cache of 2 past tokens: offset 2, query i sees keys 0 .. i+2.
  expect_table(causal(2, 5, Alignment::explicit_, 2), {{1, 1, 1, 0, 0}, {1, 1, 1, 1, 0}}, "off2");
  // A negative offset hides the diagonal itself.
  expect_table(causal(3, 3, Alignment::explicit_, -1), {{0, 0, 0}, {1, 0, 0}, {1, 1, 0}}, "off-1");
  // Lq > Lk with explicit offsets: +1 shows every key to every row; -2 hides rows 0 and 1 completely.
  expect_table(causal(4, 2, Alignment::explicit_, 1), {{1, 1}, {1, 1}, {1, 1}, {1, 1}}, "off1 Lq>Lk");
  expect_table(causal(4, 2, Alignment::explicit_, -2), {{0, 0}, {0, 0}, {1, 0}, {1, 1}}, "off-2 Lq>Lk");
}

TEST(Masks, CausalPerBatchOffsets) {
  Problem p = causal(2, 4, Alignment::explicit_);
  p.B = 2;
  p.causal_offsets = {0, 2};
  const ReferenceResult r = reference_attention(p, scalar_inputs(p, {1, 2, 3, 4}, {1, 2, 3, 4}));
  const std::vector<double> a = {1, 2, 3, 4}, v = {1, 2, 3, 4};
  expect_row(r, p, 0, {1, 0, 0, 0}, v, "b0 offset 0");
  expect_row(r, p, 1, {1.0 / 3, 2.0 / 3, 0, 0}, v, "b0 offset 0");
  expect_row(r, p, 2, {1.0 / 6, 2.0 / 6, 3.0 / 6, 0}, v, "b1 offset 2");
  expect_row(r, p, 3, {0.1, 0.2, 0.3, 0.4}, v, "b1 offset 2");
}

TEST(Masks, KeyPadding) {
  Problem p = scalar_problem(3, 1, 1, 1, 4);
  p.key_lengths = {2, 4, 1};
  const std::vector<double> v = {1, 2, 3, 4};
  const ReferenceResult r = reference_attention(p, scalar_inputs(p, {1, 2, 3, 4}, v));
  expect_row(r, p, 0, {1.0 / 3, 2.0 / 3, 0, 0}, v, "len 2");
  expect_row(r, p, 1, {0.1, 0.2, 0.3, 0.4}, v, "len 4");
  expect_row(r, p, 2, {1, 0, 0, 0}, v, "len 1");
}

TEST(Masks, BottomRightUsesTheBatchKeyLength) {
  // Lq=2; batch 0 has 3 valid keys (offset 1), batch 1 has 4 (offset 2).
  Problem p = causal(2, 4, Alignment::bottom_right);
  p.B = 2;
  p.key_lengths = {3, 4};
  const std::vector<double> v = {1, 2, 3, 4};
  const ReferenceResult r = reference_attention(p, scalar_inputs(p, {1, 2, 3, 4}, v));
  expect_row(r, p, 0, {1.0 / 3, 2.0 / 3, 0, 0}, v, "b0 i0: keys 0..1");
  expect_row(r, p, 1, {1.0 / 6, 2.0 / 6, 3.0 / 6, 0}, v, "b0 i1: keys 0..2");
  expect_row(r, p, 2, {1.0 / 6, 2.0 / 6, 3.0 / 6, 0}, v, "b1 i0: keys 0..2");
  expect_row(r, p, 3, {0.1, 0.2, 0.3, 0.4}, v, "b1 i1: keys 0..3");
}

TEST(Masks, BooleanMaskBroadcastOverBatchAndKeys) {
  // mask [B=2, 1, 1, Lk=3]: one key mask per batch, broadcast over heads and queries.
  Problem p = scalar_problem(2, 2, 2, 2, 3);
  p.mask_shape = std::array<int64_t, 4>{2, 1, 1, 3};
  Inputs in = scalar_inputs(p, {1, 2, 3}, {6, 12, 18});
  in.mask = Tensor(DType::u8, {2, 1, 1, 3});
  const int m[2][3] = {{1, 0, 1}, {0, 1, 1}};
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 3; ++j) in.mask->put(b, 0, 0, j, m[b][j]);
  const ReferenceResult r = reference_attention(p, in);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 2; ++i) {
      expect_row(r, p, (0 * 2 + h) * 2 + i, {0.25, 0, 0.75}, {6, 12, 18}, "b0");  // out 1.5 + 13.5 = 15
      expect_row(r, p, (1 * 2 + h) * 2 + i, {0, 0.4, 0.6}, {6, 12, 18}, "b1");
    }
}

TEST(Masks, BooleanMaskPerHeadAndQuery) {
  // mask [1, Hq=2, Lq=2, 1]: whole rows on or off per (head, query); the off rows are fully masked.
  Problem p = scalar_problem(1, 2, 1, 2, 2);
  p.mask_shape = std::array<int64_t, 4>{1, 2, 2, 1};
  Inputs in = scalar_inputs(p, {1, 3}, {4, 8});
  in.mask = Tensor(DType::u8, {1, 2, 2, 1});
  in.mask->put(0, 0, 0, 0, 1);
  in.mask->put(0, 1, 1, 0, 1);
  const ReferenceResult r = reference_attention(p, in);
  expect_row(r, p, 0, {0.25, 0.75}, {4, 8}, "h0 i0 on");
  expect_row(r, p, 3, {0.25, 0.75}, {4, 8}, "h1 i1 on");
  for (int64_t row : {1, 2}) {
    EXPECT_EQ(r.out[static_cast<size_t>(row)], 0.0);
    EXPECT_EQ(r.lse[static_cast<size_t>(row)], -INFINITY);
  }
}

TEST(Masks, AdditiveBiasPerKeyMultipliesWeights) {
  // bias [1,1,1,Lk] = log(m_j): weights proportional to a_j * m_j = (1*4, 2*1, 3*2) / 12.
  Problem p = scalar_problem(1, 1, 1, 2, 3);
  p.bias_shape = std::array<int64_t, 4>{1, 1, 1, 3};
  p.bias_dtype = DType::f64;
  Inputs in = scalar_inputs(p, {1, 2, 3}, {12, 24, 36});
  in.bias = Tensor(DType::f64, {1, 1, 1, 3});
  const double m[3] = {4, 1, 2};
  for (int j = 0; j < 3; ++j) in.bias->put(0, 0, 0, j, std::log(m[j]));
  const ReferenceResult r = reference_attention(p, in);
  for (int64_t i = 0; i < 2; ++i) {
    expect_row(r, p, i, {4.0 / 12, 2.0 / 12, 6.0 / 12}, {12, 24, 36}, "bias per key");  // out 4 + 4 + 18 = 26
    EXPECT_NEAR(r.out[static_cast<size_t>(i)], 26.0, 1e-13);
    EXPECT_NEAR(r.lse[static_cast<size_t>(i)], std::log(12.0), 1e-14);
  }
}

TEST(Masks, AdditiveBiasPerRowShiftsOnlyTheLse) {
  // bias [1,1,Lq,1] is constant along each row: softmax unchanged, lse shifted by the row's bias.
  Problem p = scalar_problem(1, 1, 1, 2, 3);
  p.bias_shape = std::array<int64_t, 4>{1, 1, 2, 1};
  Inputs in = scalar_inputs(p, {1, 2, 3}, {6, 0, -6});
  in.bias = Tensor(DType::f32, {1, 1, 2, 1});
  in.bias->put(0, 0, 0, 0, 5.0);
  in.bias->put(0, 0, 1, 0, -3.0);
  const ReferenceResult r = reference_attention(p, in);
  expect_row(r, p, 0, {1.0 / 6, 2.0 / 6, 3.0 / 6}, {6, 0, -6}, "row bias");  // out 1 - 3 = -2
  expect_row(r, p, 1, {1.0 / 6, 2.0 / 6, 3.0 / 6}, {6, 0, -6}, "row bias");
  EXPECT_NEAR(r.lse[0], std::log(6.0) + 5.0, 1e-14);
  EXPECT_NEAR(r.lse[1], std::log(6.0) - 3.0, 1e-14);
}

TEST(Masks, AdditiveBiasFullShapeAndMinusInfinity) {
  // bias [B=2,H=1,1,Lk=2] per batch; -inf in a bias masks like a boolean mask (PyTorch float attn_mask).
  Problem p = scalar_problem(2, 1, 1, 1, 2);
  p.bias_shape = std::array<int64_t, 4>{2, 1, 1, 2};
  Inputs in = scalar_inputs(p, {1, 1}, {2, 4});
  in.bias = Tensor(DType::f32, {2, 1, 1, 2});
  in.bias->put(0, 0, 0, 0, std::log(3.0));  // batch 0: weights 3:1
  in.bias->put(1, 0, 0, 0, -INFINITY);      // batch 1: key 0 masked
  const ReferenceResult r = reference_attention(p, in);
  EXPECT_NEAR(r.weights[0], 0.75, 1e-7);  // log 3 stored in fp32: 1e-7 relative
  EXPECT_NEAR(r.out[0], 2.5, 1e-6);
  EXPECT_EQ(r.weights[2], 0.0);
  EXPECT_EQ(r.weights[3], 1.0);
  EXPECT_EQ(r.out[1], 4.0);
}

TEST(Masks, SlidingWindowLeft) {  // window (1, unbounded right), no causal: keys i-1 .. Lk-1
  Problem p = scalar_problem(1, 1, 1, 4, 4);
  p.window_left = 1;
  expect_table(p, {{1, 1, 1, 1}, {1, 1, 1, 1}, {0, 1, 1, 1}, {0, 0, 1, 1}}, "win(1,-1)");
}

TEST(Masks, SlidingWindowRight) {  // window (unbounded left, 1): keys 0 .. i+1
  Problem p = scalar_problem(1, 1, 1, 4, 4);
  p.window_right = 1;
  expect_table(p, {{1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 1}, {1, 1, 1, 1}}, "win(-1,1)");
}

TEST(Masks, SlidingWindowWithCausal) {  // local causal attention: keys i-2 .. i
  Problem p = causal(5, 5, Alignment::top_left);
  p.window_left = 2;
  p.window_right = 0;
  expect_table(p, {{1, 0, 0, 0, 0}, {1, 1, 0, 0, 0}, {1, 1, 1, 0, 0}, {0, 1, 1, 1, 0}, {0, 0, 1, 1, 1}}, "win2");
}

TEST(Masks, SlidingWindowFollowsBottomRightDiagonal) {
  // Lq=2, Lk=5, bottom-right: diagonal of query i is key i+3; window (1,1) keeps i+2 .. i+4.
  Problem p = scalar_problem(1, 1, 1, 2, 5);
  p.alignment = Alignment::bottom_right;
  p.window_left = p.window_right = 1;
  expect_table(p, {{0, 0, 1, 1, 1}, {0, 0, 0, 1, 1}}, "win(1,1)-br");
}

TEST(Masks, SoftcapAfterScaleBeforeBias) {
  // score = c*tanh(scale*q*k / c) + bias, in that order: scale 2, c = 1.5, bias log(3) on key 1.
  Problem p = scalar_problem(1, 1, 1, 1, 3);
  p.scale = 2.0;
  p.softcap = 1.5;
  p.bias_shape = std::array<int64_t, 4>{1, 1, 1, 3};
  p.bias_dtype = DType::f64;
  const std::vector<double> a = {1, 2, 4}, v = {1, -1, 2};
  Inputs in = scalar_inputs(p, a, v);
  in.bias = Tensor(DType::f64, {1, 1, 1, 3});
  in.bias->put(0, 0, 0, 1, std::log(3.0));
  const ReferenceResult r = reference_attention(p, in);
  std::vector<double> e(3);
  double sum = 0;
  for (int j = 0; j < 3; ++j) {
    const double s = 1.5 * std::tanh(2.0 * std::log(a[static_cast<size_t>(j)]) / 1.5) + (j == 1 ? std::log(3.0) : 0);
    e[static_cast<size_t>(j)] = std::exp(s);
    sum += e[static_cast<size_t>(j)];
  }
  for (double& x : e) x /= sum;
  expect_row(r, p, 0, e, v, "softcap");
  EXPECT_NEAR(r.lse[0], std::log(sum), 1e-14);
  // Not capped: the bias of key 1 lifts it above the cap c = 1.5 (the score would be <= 1.5 if capped after).
  EXPECT_GT(e[1] / e[0], std::exp(1.5));
}

TEST(Masks, SoftcapBoundsLargeLogits) {
  // Scores +-1e4 capped at c=2: weights exp(2) : exp(-2) exactly as the closed form says, never overflow.
  Problem p = scalar_problem(1, 1, 1, 1, 2);
  p.softcap = 2.0;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  in.q.fill(1.0);
  in.k.put(0, 0, 0, 0, 1e4);
  in.k.put(0, 0, 1, 0, -1e4);
  in.v.put(0, 0, 0, 0, 1.0);
  const ReferenceResult r = reference_attention(p, in);
  const double w0 = std::exp(2.0) / (std::exp(2.0) + std::exp(-2.0));
  EXPECT_NEAR(r.weights[0], w0, 1e-15);
  EXPECT_NEAR(r.out[0], w0, 1e-15);
}

TEST(Masks, FlashAttentionDocumentedBottomRightTables) {
  // The two tables printed in FlashAttention's flash_attn_func docstring ("1 = keep, 0 = masked out"):
  // seqlen_q=2, seqlen_k=5 and seqlen_q=5, seqlen_k=2, causal aligned to the bottom right corner.
  expect_table(causal(2, 5, Alignment::bottom_right), {{1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}}, "fa 2x5");
  expect_table(causal(5, 2, Alignment::bottom_right), {{0, 0}, {0, 0}, {0, 0}, {1, 0}, {1, 1}}, "fa 5x2");
}

TEST(Masks, PyTorchCausalVariantDocumentedTables) {
  // torch.nn.attention.bias.CausalVariant documents both variants for shape (3, 4):
  // UPPER_LEFT (is_causal, our top_left) and LOWER_RIGHT (diagonal offset size[1] - size[0], our bottom_right).
  expect_table(causal(3, 4, Alignment::top_left), {{1, 0, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}}, "upper-left");
  expect_table(causal(3, 4, Alignment::bottom_right), {{1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 1}}, "lower-right");
}
