// Rotary position embedding (rope.hpp, the `rope` library entry): the rotation and the frequency scalings equal
// formulas written out here; scores depend only on relative positions; rotary_dim 0 is no RoPE bit for bit; cpu
// and cpu-flash match the reference and fail against the problem without RoPE or with the other pairing;
// validation names the field; a backend that does not declare `rope` is never offered it; and the fp32-angle
// contract term: a kernel computing angles in fp32 passes at 128k positions while one whose angles are one
// position off fails, and the measured angle error stays inside the declared bound at 1k..1M positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>

#include "attncheck/contract.hpp"
#include "attncheck/features.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/error_scales.hpp"
#include "attncheck/rng.hpp"
#include "attncheck/rope.hpp"
#include "impl_check.hpp"

namespace attncheck {
namespace {

Problem base(DType t = DType::f32) {
  Problem p;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 9, p.Lk = 37, p.Dqk = 16, p.Dv = 8, p.dtype = t;
  p.rotary_dim = 16;
  p.want_lse = true;
  return p;
}

TEST(Rope, RotationEqualsTheWrittenOutFormula) {
  // Dqk 6, rotary_dim 4, theta 100: inv_freq {1, 0.1}; position 3.
  for (bool interleaved : {false, true}) {
    Problem p;
    p.Dqk = p.Dv = 6, p.rotary_dim = 4, p.rope_theta = 100.0, p.rotary_interleaved = interleaved;
    double x[6] = {1, 2, 3, 4, 5, 6};
    rope_rotate(p, rope_inv_freq(p), 3, x);
    const double t0 = 3.0, t1 = 0.3;
    // NeoX pairs (0, 2), (1, 3); GPT-J pairs (0, 1), (2, 3).
    const int a0 = 0, b0 = interleaved ? 1 : 2, a1 = interleaved ? 2 : 1, b1 = 3;
    const double in[6] = {1, 2, 3, 4, 5, 6};
    EXPECT_NEAR(x[a0], in[a0] * std::cos(t0) - in[b0] * std::sin(t0), 1e-15);
    EXPECT_NEAR(x[b0], in[b0] * std::cos(t0) + in[a0] * std::sin(t0), 1e-15);
    EXPECT_NEAR(x[a1], in[a1] * std::cos(t1) - in[b1] * std::sin(t1), 1e-15);
    EXPECT_NEAR(x[b1], in[b1] * std::cos(t1) + in[a1] * std::sin(t1), 1e-15);
    EXPECT_EQ(x[4], 5.0);  // beyond rotary_dim: passed through
    EXPECT_EQ(x[5], 6.0);
  }
}

TEST(Rope, ScalingsEqualTransformersFormulas) {
  Problem p;
  p.Dqk = p.Dv = p.rotary_dim = 128;
  p.rope_theta = 500000.0;
  const std::vector<double> plain = rope_inv_freq(p);
  EXPECT_DOUBLE_EQ(plain[0], 1.0);
  EXPECT_DOUBLE_EQ(plain[1], std::pow(500000.0, -2.0 / 128.0));
  Problem lin = p;
  lin.rope_linear_factor = 4;
  EXPECT_DOUBLE_EQ(rope_inv_freq(lin)[7], plain[7] / 4);
  // Llama 3.1 (factor 8, low 1, high 4, original 8192): wavelength 2 pi / inv_freq below 8192/4 = 2048 unchanged,
  // above 8192 divided by 8, between mixed with smooth = (8192 / wavelength - 1) / 3.
  Problem l3 = p;
  l3.rope_llama3_factor = 8, l3.rope_original_max = 8192;
  const std::vector<double> s = rope_inv_freq(l3);
  int low = 0, mid = 0, high = 0;
  for (size_t f = 0; f < plain.size(); ++f) {
    const double wavelen = 2 * std::numbers::pi / plain[f];
    if (wavelen < 2048) {
      ++high;
      EXPECT_EQ(s[f], plain[f]) << f;
    } else if (wavelen > 8192) {
      ++low;
      EXPECT_DOUBLE_EQ(s[f], plain[f] / 8) << f;
    } else {
      ++mid;
      const double smooth = (8192 / wavelen - 1) / 3;
      EXPECT_NEAR(s[f], (1 - smooth) * plain[f] / 8 + smooth * plain[f], 1e-15) << f;
    }
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_GT(high, 0);
  // YaRN (factor 4, original 32768, theta 1e6, dim 128): correction dims floor(23.59) = 23 and ceil(39.65) = 40;
  // pairs up to 23 keep their frequency, from 40 on it is divided by 4, between a linear ramp; cos/sin x 1.1386.
  Problem y = p;
  y.rope_theta = 1e6, y.rope_yarn_factor = 4, y.rope_original_max = 32768;
  const std::vector<double> yp = [&] {
    Problem q = y;
    q.rope_yarn_factor = 1;
    return rope_inv_freq(q);
  }();
  const std::vector<double> ys = rope_inv_freq(y);
  EXPECT_NEAR(128 * std::log(32768 / (32 * 2 * std::numbers::pi)) / (2 * std::log(1e6)), 23.59, 0.01);
  EXPECT_NEAR(128 * std::log(32768 / (1 * 2 * std::numbers::pi)) / (2 * std::log(1e6)), 39.65, 0.01);
  for (int f = 0; f <= 23; ++f) EXPECT_DOUBLE_EQ(ys[size_t(f)], yp[size_t(f)]) << f;
  for (int f = 40; f < 64; ++f) EXPECT_DOUBLE_EQ(ys[size_t(f)], yp[size_t(f)] / 4) << f;
  const double ramp = (30.0 - 23.0) / (40.0 - 23.0);
  EXPECT_NEAR(ys[30], yp[30] / 4 * ramp + yp[30] * (1 - ramp), 1e-15);
  EXPECT_NEAR(rope_attention_factor(y), 1.0 + 0.1 * std::log(4.0), 1e-15);
}

TEST(Rope, ShiftingEveryPositionLeavesTheOutputUnchanged) {
  // Scores depend on i - j only: moving every query and key by the same amount changes nothing but the angle
  // rounding (fp64 here: ~1e-16 * position).
  Problem p = base();
  p.causal = true, p.alignment = Alignment::bottom_right;
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 3);
  const ExpectedAttention r0 = expected_attention(p, in);
  Problem shifted = p;
  shifted.rope_offsets = {70000, 1000000};
  const ExpectedAttention r1 = expected_attention(shifted, in);
  for (size_t n = 0; n < r0.out.size(); ++n) EXPECT_NEAR(r0.out[n], r1.out[n], 1e-9) << n;
  // An implementation's output for the shifted problem also passes the unshifted one (and vice versa).
  for (const char* name : {"cpu", "cpu-flash"}) {
    Outputs o;
    ASSERT_TRUE(run_impl(*find_impl(name), shifted, in, o).ok);
    EXPECT_TRUE(judge(p, r0, o).pass) << name;
  }
  // A query moved alone is a different problem (guard: the shift is not simply ignored).
  Problem qmoved = p;
  qmoved.alignment = Alignment::explicit_, qmoved.causal_offset = p.Lk - p.Lq + 1;
  qmoved.causal = false;
  Problem pnc = p;
  pnc.causal = false;
  Outputs o;
  ASSERT_TRUE(run_impl(*find_impl("cpu"), qmoved, in, o).ok);
  EXPECT_FALSE(judge(pnc, expected_attention(pnc, in), o).pass);
}

TEST(Rope, RotaryDimZeroIsNoRopeBitForBit) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    Problem plain = base(t);
    plain.rotary_dim = 0;
    Problem off = plain;  // every other RoPE parameter set, rotary_dim 0: inert
    off.rope_theta = 500000, off.rotary_interleaved = true, off.rope_offsets = {5, 70000}, off.rope_yarn_factor = 4;
    EXPECT_FALSE(uses_modifications(off));
    const Inputs in = gen::generate_inputs(plain, gen::Distribution::normal, 4);
    for (const char* name : {"cpu", "cpu-flash", "reference"}) {
      Outputs a, b;
      ASSERT_TRUE(run_impl(*find_impl(name), plain, in, a).ok);
      ASSERT_TRUE(run_impl(*find_impl(name), off, in, b).ok);
      EXPECT_EQ(a.out.bytes, b.out.bytes) << name << " " << to_string(t);
      EXPECT_EQ(a.lse->bytes, b.lse->bytes) << name;
    }
  }
}

std::vector<Problem> rope_problems() {
  std::vector<Problem> out;
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (int v = 0; v < 4; ++v) {
      Problem p = base(t);
      p.rotary_interleaved = v % 2;
      if (v >= 2) p.rotary_dim = 6;  // partial: 10 dims pass through
      p.causal = v != 1;
      p.alignment = v == 3 ? Alignment::explicit_ : Alignment::bottom_right;
      p.causal_offset = v == 3 ? 70000 : 0;  // queries far past the keys
      if (v == 0) p.rope_offsets = {65536 + 11, 3};
      if (v == 2) p.rope_theta = 500000, p.rope_llama3_factor = 8, p.rope_original_max = 64;
      if (v == 3) p.rope_yarn_factor = 4, p.rope_original_max = 256, p.causal = false;
      out.push_back(p);
    }
  Problem paged = base(DType::f16);
  paged.page_size = 8, paged.num_pages = 12, paged.alignment = Alignment::bottom_right, paged.causal = true;
  for (int64_t e = 0; e < paged.B * paged.pages_per_seq(); ++e) paged.block_table.push_back((e * 5) % 12);
  paged.key_lengths = {37, 30};
  out.push_back(paged);
  Problem append = base(DType::bf16);
  append.past_len = 30, append.alignment = Alignment::bottom_right, append.causal = true;
  append.rope_offsets = {100000, 0};
  out.push_back(append);
  return out;
}

TEST(Rope, CpuImplsMatchReferenceAndFailWithoutRope) {
  expect_impls_match_reference(rope_problems(), [](Problem p) {
    p.rotary_dim = 0;
    return p;
  });
}

TEST(Rope, OtherPairingOrOffsetFails) {
  // The same outputs judged against the other pairing (NeoX <-> GPT-J) fail. (Dropping rope_offsets moves queries
  // and keys alike: no change, ShiftingEveryPositionLeavesTheOutputUnchanged.)
  for (const Problem& p : rope_problems()) {
    if (p.page_size || p.past_len) continue;
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 6);
    Outputs o;
    ASSERT_TRUE(run_impl(*find_impl("cpu-flash"), p, in, o).ok);
    Problem swapped = p;
    swapped.rotary_interleaved = !p.rotary_interleaved;
    EXPECT_FALSE(judge(swapped, expected_attention(swapped, in), o).pass) << p.name();
  }
}

TEST(Rope, ValidationNamesTheField) {
  auto msg = [](const std::function<void(Problem&)>& f) {
    Problem q = base();
    f(q);
    return validation_message(q);
  };
  EXPECT_NE(msg([](Problem& q) { q.rotary_dim = 5; }).find("rotary_dim must be even and in [0, Dqk]"),
            std::string::npos);
  EXPECT_NE(
      msg([](Problem& q) { q.rotary_dim = 18; }).find("rotary_dim must be even and in [0, Dqk] (0 = off), got 18"),
      std::string::npos);
  EXPECT_NE(msg([](Problem& q) { q.rope_theta = 0; }).find("rope_theta must be finite and > 0"), std::string::npos);
  EXPECT_NE(msg([](Problem& q) { q.rope_theta = -5; }).find("rope_theta must be finite and > 0"), std::string::npos);
  EXPECT_NE(msg([](Problem& q) { q.rope_offsets = {1}; }).find("rope_offsets must have B=2 entries, got 1"),
            std::string::npos);
  EXPECT_NE(msg([](Problem& q) {
              q.rope_offsets = {0, (int64_t{1} << 24) - 10};
            }).find("rope_offsets: key 11 of batch 1 is at RoPE position 16777217"),
            std::string::npos);
  // Top-left alignment with more queries than keys and an explicit negative offset: a query before position 0.
  EXPECT_NE(msg([](Problem& q) { q.alignment = Alignment::explicit_, q.causal_offset = -3; }).find("outside [0, 2^24]"),
            std::string::npos);
  EXPECT_NE(msg([](Problem& q) { q.rope_linear_factor = 2, q.rope_yarn_factor = 2; }).find("at most one scaling"),
            std::string::npos);
  EXPECT_NE(msg([](Problem& q) {
              q.rope_high_freq_factor = 0.5;
            }).find("rope_high_freq_factor must be finite and > rope_low_freq_factor"),
            std::string::npos);
  EXPECT_EQ(msg([](Problem& q) {
              q.B = 1, q.cu_seqlens_q = {0, 9}, q.cu_seqlens_k = {0, 37};
            }),
            "accepted");  // varlen: test_positions.cpp
  EXPECT_EQ(msg([](Problem& q) { q.rope_offsets = {0, 1 << 20}; }), "accepted");
}

TEST(Rope, UndeclaredRopeIsUnsupportedAndNamesRoundTrip) {
  const Problem p = rope_problems()[2];
  Capabilities c;  // plugins and workers that predate RoPE declare no modification
  EXPECT_EQ(check_capabilities(c, p).reason, "modification rope not supported");
  c.mods = {"rope"};
  EXPECT_TRUE(check_capabilities(c, p).ok);
  EXPECT_TRUE(backward_modelled(p).ok);  // the reference has their gradients
  for (const Problem& q : rope_problems()) {
    const Problem back = parse_name(q.name());
    for (const Field& f : problem_fields()) EXPECT_TRUE(field_equal(q, back, f)) << f.key << " " << q.name();
    EXPECT_NE(q.short_name().find("rope"), std::string::npos) << q.short_name();
  }
}

// ---- the fp32-angle contract term ---------------------------------------------------------------------------
// How kernels compute the rotation, written out independently of rope.cpp: inv_freq = 1 / powf(theta, 2f / r) in
// fp32, angle = fl32(pos * inv_freq) (or fp16: the fault), cosf / sinf (optionally stored in an fp16 table), the
// rotation in fp32. NeoX pairing, no scaling.
enum class Angles { fp32, fp16, table_fp16 };
void kernel_rotate(int64_t r, double theta, int64_t pos, Angles a, float* x) {
  for (int64_t f = 0; f < r / 2; ++f) {
    const float inv = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * f) / static_cast<float>(r));
    float t = static_cast<float>(pos) * inv;
    if (a == Angles::fp16) t = static_cast<float>(round_to(DType::f16, t));
    float c = std::cos(t), s = std::sin(t);
    if (a == Angles::table_fp16)
      c = static_cast<float>(round_to(DType::f16, c)), s = static_cast<float>(round_to(DType::f16, s));
    const float xa = x[f], xb = x[f + r / 2];
    x[f] = xa * c - xb * s;
    x[f + r / 2] = xb * c + xa * s;
  }
}

// A kernel that rotates q and k itself (angles as `a`, query position + shift), then runs cpu without RoPE.
class AngleKernel final : public Impl {
 public:
  AngleKernel(Angles a, int64_t shift) : a_(a), shift_(shift) {}
  std::string name() const override { return "test-angles"; }
  std::string description() const override { return "test kernel: RoPE with fp32/fp16 angles, then cpu"; }
  Capabilities capabilities() const override { return find_impl("cpu")->capabilities(); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    Problem plain = p;
    plain.rotary_dim = 0;
    Inputs r = in;
    for (int which : {0, 1}) {
      Tensor& t = which == 0 ? r.q : r.k;
      const int64_t H = which == 0 ? p.Hq : p.Hkv, L = which == 0 ? p.Lq : p.Lk;
      std::vector<float> x(static_cast<size_t>(p.Dqk));
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < L; ++i) {
            for (int64_t d = 0; d < p.Dqk; ++d) x[size_t(d)] = static_cast<float>(t.at(b, h, i, d));
            const int64_t pos =
                which == 0 ? rope_position(p, b, i + p.diagonal_offset(b)) + shift_ : rope_position(p, b, i);
            kernel_rotate(p.rotary_dim, p.rope_theta, pos, a_, x.data());
            for (int64_t d = 0; d < p.Dqk; ++d) t.put(b, h, i, d, x[size_t(d)]);  // rounded to the dtype
          }
    }
    find_impl("cpu")->run(plain, r, out);
  }

 private:
  Angles a_;
  int64_t shift_;
};

ToleranceModel with_rope(RopeMath m, DType t) {
  ToleranceModel tm;
  PrecisionContract c = default_contract(t);
  c.rope = m;
  tm.contract = c;
  return tm;
}

TEST(Rope, Fp32AnglesPassAt128kAndOnePositionOffFails) {
  // Queries and keys around position 131072 (bottom-right: the 8 queries are the last 8 of 96 keys), logits of
  // magnitude ~8 (scale 1 on unit-variance vectors of 64 dims), so each row leans on few keys.
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    Problem p;
    p.B = 1, p.Hq = 2, p.Hkv = 1, p.Lq = 8, p.Lk = 96, p.Dqk = p.Dv = 64, p.dtype = t, p.rotary_dim = 64;
    p.scale = 1.0, p.causal = true, p.alignment = Alignment::bottom_right, p.want_lse = true;
    p.rope_offsets = {131072 - 48};
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 11);
    const ExpectedAttention ref = expected_attention(p, in);
    auto verdict = [&](Angles a, int64_t shift, RopeMath declared) {
      Outputs o = make_outputs(p);
      AngleKernel(a, shift).run(p, in, o);
      return judge(p, ref, o, with_rope(declared, t));
    };
    const Verdict fp32 = verdict(Angles::fp32, 0, RopeMath::fp32);
    EXPECT_TRUE(fp32.pass) << to_string(t) << " " << fp32.worst().describe();
    const Verdict table = verdict(Angles::table_fp16, 0, RopeMath::table_fp16);
    EXPECT_TRUE(table.pass) << to_string(t) << " " << table.worst().describe();
    EXPECT_FALSE(verdict(Angles::fp32, 1, RopeMath::fp32).pass) << to_string(t) << ": query one position off";
    EXPECT_FALSE(verdict(Angles::fp32, -1, RopeMath::table_fp16).pass) << to_string(t) << ": one position back";
    EXPECT_FALSE(verdict(Angles::fp16, 0, RopeMath::table_fp16).pass) << to_string(t) << ": fp16 angles";
    // fp32: without the declaration, fp32 angles are outside the exact contract at this position (the term is
    // needed). fp16/bf16: the rounding of the rotated operands to the input format already covers them here.
    if (t == DType::f32) {
      EXPECT_FALSE(verdict(Angles::fp32, 0, RopeMath::exact).pass);
    }
  }
}

TEST(Rope, MeasuredFp32AngleErrorIsInsideItsBound) {
  // One score q.k of 128-dim vectors (rotary 128, theta 1e4 and 5e5) at query position P and a key up to 4096
  // before it, rotated with fp32 angles vs fp64: |error| over the declared bound (docs/tolerance.md "Rotary
  // angles": 5u * sum_f inv_freq_f |q_f| |k_f| (P_q + P_k) + 2 * 7u * |q| |k|), worst of 400 draws per position.
  // The numbers (and how far one position off lands, relative to the bound) are printed for the docs; the test
  // asserts the ratio stays below 1. That one position off fails a judged case: the test above.
  const double u = std::ldexp(1.0, -24);
  for (double theta : {1e4, 5e5})
    for (int64_t P : {int64_t{1} << 10, int64_t{1} << 16, int64_t{1} << 19, int64_t{1} << 20}) {
      Problem p;
      p.Dqk = p.Dv = p.rotary_dim = 128, p.rope_theta = theta;
      const std::vector<double> inv = rope_inv_freq(p);
      Rng rng(static_cast<uint64_t>(P) + 7);
      double worst = 0, worst_rel = 0;
      std::vector<double> off_by_one;
      for (int n = 0; n < 400; ++n) {
        std::vector<double> q(128), k(128);
        for (auto* v : {&q, &k})
          for (double& x : *v) x = std::ldexp(double(rng.pick(-4096, 4096)), -12);
        const int64_t pq = P, pk = P - rng.pick(0, std::min<int64_t>(4096, P));
        std::vector<double> q64 = q, k64 = k, q1 = q;
        rope_rotate(p, inv, pq, q64.data());
        rope_rotate(p, inv, pk, k64.data());
        rope_rotate(p, inv, pq + 1, q1.data());
        std::vector<float> q32(q.begin(), q.end()), k32(k.begin(), k.end());
        kernel_rotate(128, theta, pq, Angles::fp32, q32.data());
        kernel_rotate(128, theta, pk, Angles::fp32, k32.data());
        double s64 = 0, s32 = 0, s1 = 0, sens = 0, qn = 0, kn = 0;
        for (int d = 0; d < 128; ++d) {
          s64 += q64[size_t(d)] * k64[size_t(d)], s1 += q1[size_t(d)] * k64[size_t(d)];
          s32 += double(q32[size_t(d)]) * double(k32[size_t(d)]);
          qn += q[size_t(d)] * q[size_t(d)], kn += k[size_t(d)] * k[size_t(d)];
        }
        for (int f = 0; f < 64; ++f)
          sens += inv[size_t(f)] * std::hypot(q[size_t(f)], q[size_t(f + 64)]) *
                  std::hypot(k[size_t(f)], k[size_t(f + 64)]);
        const double bound = 5 * u * sens * double(pq + pk) + 14 * u * std::sqrt(qn * kn);
        worst = std::max(worst, std::abs(s32 - s64) / bound);
        worst_rel = std::max(worst_rel, std::abs(s32 - s64) / std::sqrt(qn * kn));
        off_by_one.push_back(std::abs(s1 - s64) / bound);
      }
      std::sort(off_by_one.begin(), off_by_one.end());
      std::printf(
          "rope fp32 angles theta=%g P=%lld: worst |err|/bound %.3f, worst |err|/(|q||k|) %.3g, "
          "one position off: median error/bound %.3g\n",
          theta, static_cast<long long>(P), worst, worst_rel, off_by_one[off_by_one.size() / 2]);
      EXPECT_LE(worst, 1.0) << "theta " << theta << " P " << P;
    }
}

}  // namespace
}  // namespace attncheck
