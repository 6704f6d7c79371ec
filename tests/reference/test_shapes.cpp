// Shapes and layouts: GQA/MQA head mapping, Dqk != Dv, default/zero/negative scale, BSHD == BHSD, fp16/bf16
// inputs widened exactly, and bitwise determinism across thread counts.
#include "tiny.hpp"

#include "attncheck/error_scales.hpp"

using namespace attncheck;
using namespace tiny;

TEST(Shapes, GqaQueryHeadReadsKvHeadHOverGroup) {
  // Hq=6, Hkv=3 (groups of 2): KV head g has a = (1, g+1) and values (0, 10): out = 10 (g+1) / (g+2).
  for (int64_t hkv : {3, 1}) {
    const Problem p = scalar_problem(1, 6, hkv, 1, 2);
    const Inputs in = scalar_inputs(
        p, [](int64_t, int64_t g, int64_t j) { return j == 0 ? 1.0 : static_cast<double>(g + 1); },
        [](int64_t, int64_t, int64_t j) { return 10.0 * static_cast<double>(j); });
    const ExpectedAttention r = expected_attention(p, in);
    for (int64_t h = 0; h < 6; ++h) {
      const int64_t g = h / (6 / hkv);  // written out: Hkv=3 -> 0,0,1,1,2,2; Hkv=1 -> all 0
      EXPECT_NEAR(r.out[static_cast<size_t>(h)], 10.0 * (g + 1) / (g + 2), 1e-13) << "Hkv=" << hkv << " h=" << h;
    }
  }
  // The mapping written by hand for Hq=6, Hkv=3: heads 0..5 read 0,0,1,1,2,2 -> out 5, 5, 20/3, 20/3, 7.5, 7.5.
  const Problem p = scalar_problem(1, 6, 3, 1, 2);
  const ExpectedAttention r = expected_attention(
      p, scalar_inputs(
             p, [](int64_t, int64_t g, int64_t j) { return j == 0 ? 1.0 : static_cast<double>(g + 1); },
             [](int64_t, int64_t, int64_t j) { return 10.0 * static_cast<double>(j); }));
  const double want[6] = {5, 5, 20.0 / 3, 20.0 / 3, 7.5, 7.5};
  for (int h = 0; h < 6; ++h) EXPECT_NEAR(r.out[static_cast<size_t>(h)], want[h], 1e-13) << h;
}

TEST(Shapes, GqaFlashAttentionDocumentedExample) {
  // FlashAttention's docstring: "if Q has 6 heads and K, V have 2 heads, head 0, 1, 2 of Q will attention to head
  // 0 of K, V, and head 3, 4, 5 of Q will attention to head 1 of K, V". KV head g holds the single value 100 + g.
  const Problem p = scalar_problem(1, 6, 2, 1, 1);
  const ExpectedAttention r =
      expected_attention(p, scalar_inputs(
                                p, [](int64_t, int64_t, int64_t) { return 1.0; },
                                [](int64_t, int64_t g, int64_t) { return 100.0 + static_cast<double>(g); }));
  const double want[6] = {100, 100, 100, 101, 101, 101};
  for (int h = 0; h < 6; ++h) EXPECT_EQ(r.out[static_cast<size_t>(h)], want[h]) << h;
}

TEST(Shapes, DqkDiffersFromDvAndDefaultScale) {
  // Dqk=4 (default scale 1/2), Dv=3. q = (2,0,0,0), k_j = (log a_j, 9, -9, 9): score = log a_j with a = (1, 3).
  Problem p;
  p.dtype = DType::f64;
  p.Lk = 2, p.Dqk = 4, p.Dv = 3;
  p.want_weights = true;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  in.q.put(0, 0, 0, 0, 2.0);
  const double a[2] = {1, 3};
  const double v[2][3] = {{4, -8, 12}, {-4, 16, 0}};
  for (int j = 0; j < 2; ++j) {
    in.k.put(0, 0, j, 0, std::log(a[j]));
    for (int d = 1; d < 4; ++d) in.k.put(0, 0, j, d, d % 2 ? 9.0 : -9.0);
    for (int d = 0; d < 3; ++d) in.v.put(0, 0, j, d, v[j][d]);
  }
  const ExpectedAttention r = expected_attention(p, in);
  // weights 1/4, 3/4: out = (4 - 12, -8 + 48, 12 + 0) / 4 = (-2, 10, 3)
  EXPECT_NEAR(r.weights[0], 0.25, 1e-15);
  EXPECT_NEAR(r.out[0], -2.0, 1e-14);
  EXPECT_NEAR(r.out[1], 10.0, 1e-14);
  EXPECT_NEAR(r.out[2], 3.0, 1e-14);
}

TEST(Shapes, ZeroAndNegativeScale) {
  Problem p = scalar_problem(1, 1, 1, 1, 3);
  const std::vector<double> v = {3, 6, 9};
  p.scale = 0.0;  // every score 0: uniform weights
  expect_row(expected_attention(p, scalar_inputs(p, {1, 2, 4}, v)), p, 0, {1.0 / 3, 1.0 / 3, 1.0 / 3}, v, "0");
  p.scale = -1.0;  // scores -log a_j: weights proportional to 1/a_j = (4, 2, 1) / 7
  expect_row(expected_attention(p, scalar_inputs(p, {1, 2, 4}, v)), p, 0, {4.0 / 7, 2.0 / 7, 1.0 / 7}, v, "-1");
}

TEST(Shapes, BshdEqualsBhsd) {
  Problem p;
  p.dtype = DType::f32;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 5, p.Lk = 7, p.Dqk = 3, p.Dv = 6;
  p.causal = true;
  p.alignment = Alignment::bottom_right;
  p.want_weights = true;
  Inputs a{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  fill_random(a.q, 11);
  fill_random(a.k, 12);
  fill_random(a.v, 13);
  Problem ps = p;
  ps.layout = Layout::BSHD;
  Inputs s{make_qkv(ps, 0), make_qkv(ps, 1), make_qkv(ps, 2), {}, {}, {}, {}, {}};
  ASSERT_NE(s.q.strides, a.q.strides);  // really a different memory order
  for (auto [src, dst] : {std::pair{&a.q, &s.q}, std::pair{&a.k, &s.k}, std::pair{&a.v, &s.v}})
    for (int64_t b = 0; b < src->shape[0]; ++b)
      for (int64_t h = 0; h < src->shape[1]; ++h)
        for (int64_t l = 0; l < src->shape[2]; ++l)
          for (int64_t d = 0; d < src->shape[3]; ++d) dst->put(b, h, l, d, src->at(b, h, l, d));
  const ExpectedAttention ra = expected_attention(p, a), rs = expected_attention(ps, s);
  EXPECT_TRUE(same_bits(ra.out, rs.out));
  EXPECT_TRUE(same_bits(ra.lse, rs.lse));
  EXPECT_TRUE(same_bits(ra.weights, rs.weights));
}

TEST(Shapes, HalfAndBfloat16InputsAreWidenedExactly) {
  // Raw bit patterns with known exact values: the fp16 / bf16 problem gives the same bits as the fp64 problem
  // fed those exact values.
  struct Case {
    DType t;
    uint16_t bits[4];
    double value[4];
  };
  const Case cases[] = {
      {DType::f16,
       {0x3C01, 0x0001, 0xFBFF, 0x03FF},
       {1 + std::ldexp(1, -10), std::ldexp(1, -24), -65504, 1023 * std::ldexp(1, -24)}},
      {DType::bf16,
       {0x3F81, 0x0001, 0xC2F7, 0x7F7F},
       {1 + std::ldexp(1, -7), std::ldexp(1, -133), -123.5, std::ldexp(255, 120)}},
  };
  for (const Case& c : cases) {
    Problem p;
    p.dtype = c.t;
    p.Lk = 4, p.Dqk = 1, p.Dv = 1;
    p.want_weights = true;
    Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
    in.q.data<uint16_t>()[0] = c.t == DType::f16 ? 0x3400 : 0x3E80;  // 0.25 in both
    for (int j = 0; j < 4; ++j) {
      in.k.data<uint16_t>()[j] = c.bits[j];
      in.v.data<uint16_t>()[j] = c.bits[3 - j];
      EXPECT_EQ(in.k.at(0, 0, j, 0), c.value[j]) << to_string(c.t) << " bits 0x" << std::hex << c.bits[j];
    }
    Problem p64 = p;
    p64.dtype = DType::f64;
    Inputs i64{make_qkv(p64, 0), make_qkv(p64, 1), make_qkv(p64, 2), {}, {}, {}, {}, {}};
    i64.q.put(0, 0, 0, 0, 0.25);
    for (int j = 0; j < 4; ++j) {
      i64.k.put(0, 0, j, 0, c.value[j]);
      i64.v.put(0, 0, j, 0, c.value[3 - j]);
    }
    const ExpectedAttention r = expected_attention(p, in), r64 = expected_attention(p64, i64);
    EXPECT_TRUE(same_bits(r.out, r64.out)) << to_string(c.t);
    EXPECT_TRUE(same_bits(r.weights, r64.weights)) << to_string(c.t);
    EXPECT_TRUE(same_bits(r.lse, r64.lse)) << to_string(c.t);
  }
}

TEST(Shapes, BitwiseDeterministicAcrossThreadCounts) {
  Problem p;
  p.dtype = DType::bf16;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 19, p.Lk = 23, p.Dqk = 8, p.Dv = 5;
  p.causal = true;
  p.alignment = Alignment::bottom_right;
  p.window_left = 9;
  p.softcap = 3.0;
  p.bias_shape = std::array<int64_t, 4>{1, 4, 19, 23};
  p.dropout_p = 0.2;
  p.dropout_seed = 99;
  p.want_weights = true;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, Tensor(DType::f32, {1, 4, 19, 23}), {}, {}, {}};
  fill_random(in.q, 21);
  fill_random(in.k, 22);
  fill_random(in.v, 23);
  fill_random(*in.bias, 24);
  in.keep = make_keep_mask(p);
  const ExpectedAttention r1 = expected_attention(p, in, 1);
  for (int threads : {2, 7}) {
    const ExpectedAttention rn = expected_attention(p, in, threads);
    EXPECT_TRUE(same_bits(r1.out, rn.out)) << threads;
    EXPECT_TRUE(same_bits(r1.lse, rn.lse)) << threads;
    EXPECT_TRUE(same_bits(r1.weights, rn.weights)) << threads;
    EXPECT_TRUE(same_bits(r1.score_mag, rn.score_mag)) << threads;
    EXPECT_TRUE(same_bits(r1.out_abs, rn.out_abs)) << threads;
  }
  bool any_nonzero = false;
  for (double x : r1.out) any_nonzero = any_nonzero || x != 0.0;
  EXPECT_TRUE(any_nonzero);
}
