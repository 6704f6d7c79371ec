// 4-bit KV caches (llama.cpp's q4_0: d (q - 8); q4_1: d q + m; blocks of 32 with fp16 d and m, two codes per byte,
// element i of a block in byte i's low nibble and i + 16 in its high one): hand-packed bytes decode to hand-worked
// values, the reference of a 4-bit cache is the reference of the float cache unpacked here by the test, cpu and
// cpu-flash match it bit for bit, outputs judged against a misread cache (nibbles swapped, q4_0's offset forgotten,
// q4_1's m ignored, the next block's d and m) fail, hostile fields are refused naming them, and backends without
// the feature are never offered it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "attncheck/fixture.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "impl_check.hpp"

namespace attncheck {
namespace {

Problem q4_problem(DType q, DType codes) {
  Problem p;
  p.dtype = q, p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 5, p.Lk = 19, p.Dqk = 64, p.Dv = 32, p.want_lse = true;
  p.kv_scales = KvScales::block, p.kv_dtype = codes, p.kv_block = 32, p.kv_scale_dtype = DType::f16;
  return p;
}

// The 4-bit code of element d of a token's row, unpacked by hand: block d / 32 owns bytes 16 (d / 32) .. + 15;
// element i < 16 of a block is the low nibble of its byte i, element i + 16 the high nibble of byte i.
int nibble(const Tensor& t, int64_t b, int64_t h, int64_t j, int64_t d) {
  const int64_t i = d % 32;
  const auto byte = static_cast<int>(t.at(b, h, j, d / 32 * 16 + i % 16));
  return i < 16 ? byte % 16 : byte / 16;
}

// The float cache the 4-bit one stands for, decoded here (not by dequantize_kv): q, k, v in `to`.
Attended float_cache(const Problem& p, const Inputs& in, DType to) {
  Problem f = p;
  f.kv_scales = KvScales::none, f.kv_dtype = DType::i8, f.kv_block = 32, f.kv_scale_dtype = DType::f32, f.dtype = to;
  Inputs x;
  x.q = make_qkv(f, 0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dqk; ++d) x.q.put(b, h, i, d, in.q.at(b, h, i, d));
  for (int which : {1, 2}) {
    const Tensor& codes = which == 1 ? in.k : in.v;
    const Tensor& s = which == 1 ? *in.k_scale : *in.v_scale;
    Tensor t = make_qkv(f, which);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t d = 0; d < t.shape[3]; ++d) {
            const int64_t g[4] = {b, h, j, d / 32};
            const int q = nibble(codes, b, h, j, d);
            t.put(b, h, j, d,
                  p.kv_dtype == DType::q4_0 ? s.get(g) * (q - 8)
                                            : s.get(g) * q + (which == 1 ? *in.k_min : *in.v_min).get(g));
          }
    (which == 1 ? x.k : x.v) = std::move(t);
  }
  return {f, x};
}

TEST(KvQ4, HandPackedBytesDecodeToHandWorkedValues) {
  Problem p = q4_problem(DType::f32, DType::q4_0);
  p.B = 1, p.Hq = p.Hkv = 1, p.Lq = 1, p.Lk = 1, p.Dqk = p.Dv = 32;
  Inputs in;
  in.q = make_qkv(p, 0), in.k = make_qkv(p, 1), in.v = make_qkv(p, 2);
  ASSERT_EQ(in.k.shape[3], 16);  // two codes per byte
  in.k.put(0, 0, 0, 0, 0x3A), in.k.put(0, 0, 0, 15, 0xF0);
  in.k_scale = make_kv_scale(p, 1), in.v_scale = make_kv_scale(p, 2);
  in.k_scale->set_offset(0, 0.375), in.v_scale->set_offset(0, 1.5);
  // element 0: low nibble 0xA = 10 -> 0.375 * 2; element 16: high nibble 3 -> 0.375 * -5; element 15: 0 -> -8 d;
  // element 31: 15 -> 7 d; every other byte 0 -> -8 d.
  EXPECT_EQ(kv_value_at(p, in, 1, 0, 0, 0, 0), 0.75);
  EXPECT_EQ(kv_value_at(p, in, 1, 0, 0, 0, 16), -1.875);
  EXPECT_EQ(kv_value_at(p, in, 1, 0, 0, 0, 15), -3.0);
  EXPECT_EQ(kv_value_at(p, in, 1, 0, 0, 0, 31), 2.625);
  EXPECT_EQ(kv_value_at(p, in, 2, 0, 0, 0, 7), -12.0);
  p.kv_dtype = DType::q4_1;
  in.k.dtype = in.v.dtype = DType::q4_1;  // the same bytes, read as q4_1 codes
  in.k_min = make_kv_scale(p, 1), in.v_min = make_kv_scale(p, 2);
  in.k_min->set_offset(0, -2.5), in.v_min->set_offset(0, 0.25);
  EXPECT_EQ(kv_value_at(p, in, 1, 0, 0, 0, 0), 0.375 * 10 - 2.5);
  EXPECT_EQ(kv_value_at(p, in, 1, 0, 0, 0, 16), 0.375 * 3 - 2.5);
  EXPECT_EQ(kv_value_at(p, in, 1, 0, 0, 0, 31), 0.375 * 15 - 2.5);
  EXPECT_EQ(kv_value_at(p, in, 2, 0, 0, 0, 9), 0.25);
  EXPECT_EQ(validation_message(p), "accepted");
  validate(p, in);
}

TEST(KvQ4, ProducerScalesAndMinsAreNonUniformNonUnitAndDecodeCloseToTheValues) {
  for (DType c : {DType::q4_0, DType::q4_1}) {
    const Problem p = q4_problem(DType::f32, c);
    Problem plain = p;
    plain.kv_scales = KvScales::none, plain.kv_dtype = DType::i8, plain.kv_scale_dtype = DType::f32;
    const Inputs values = gen::generate_inputs(plain, gen::Distribution::normal, 3);
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 3);
    EXPECT_EQ(in.k.dtype, c);
    EXPECT_EQ(in.k.shape, (std::vector<int64_t>{2, 2, 19, 32}));
    EXPECT_EQ(in.k_min.has_value(), c == DType::q4_1);
    std::set<double> scales, mins;
    for (int64_t n = 0; n < in.k_scale->numel(); ++n) scales.insert(in.k_scale->get_offset(n));
    EXPECT_GT(scales.size(), 10u);
    EXPECT_FALSE(scales.count(1.0));
    if (c == DType::q4_1) {
      for (int64_t n = 0; n < in.k_min->numel(); ++n) mins.insert(in.k_min->get_offset(n));
      EXPECT_GT(mins.size(), 10u);
      EXPECT_FALSE(mins.count(0.0));
    }
    // Each value within half a step (plus q4_1's m rounding) of what its codes decode to.
    for (int64_t j = 0; j < p.Lk; ++j)
      for (int64_t d = 0; d < p.Dqk; ++d) {
        const int64_t g[4] = {1, 1, j, d / 32};
        const double x = values.k.at(1, 1, j, d), step = in.k_scale->get(g);
        EXPECT_LE(std::abs(kv_value_at(p, in, 1, 1, 1, j, d) - x), 0.5 * step + 0x1p-10 * std::abs(x)) << j << " " << d;
      }
  }
}

TEST(KvQ4, FourBitCacheEqualsTheFloatCacheOfItsValuesBitwise) {
  for (DType c : {DType::q4_0, DType::q4_1}) {
    for (DType q : {DType::f32, DType::bf16}) {
      Problem p = q4_problem(q, c);
      p.causal = true, p.alignment = Alignment::bottom_right, p.key_lengths = {19, 11};
      const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 7);
      const Attended f = float_cache(p, in, DType::f64);
      const ReferenceResult a = reference_attention(p, in), b = reference_attention(f.p, f.in);
      EXPECT_EQ(a.out, b.out) << p.name();
      EXPECT_EQ(a.lse, b.lse) << p.name();
    }
    // cpu and cpu-flash decode the nibbles as they load rows: each value rounded once to fp32, the float cache's.
    for (const char* name : {"cpu", "cpu-flash"})
      for (int64_t lq : {5, 1}) {
        Problem p = q4_problem(DType::f32, c);
        p.Lq = lq, p.layout = lq == 1 ? Layout::BSHD : Layout::BHSD;
        const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 9);
        const Attended f = float_cache(p, in, DType::f32);
        Outputs a, b;
        ASSERT_TRUE(run_impl(*find_impl(name), p, in, a).ok) << name << " " << p.name();
        ASSERT_TRUE(run_impl(*find_impl(name), f.p, f.in, b).ok) << name;
        EXPECT_EQ(a.out.bytes, b.out.bytes) << name << " " << p.name();
        EXPECT_EQ(a.lse->bytes, b.lse->bytes) << name << " " << p.name();
      }
  }
}

// The cache as a kernel with one of four bugs reads it, as a problem of its own (built here, element by element).
enum class Q4Fault { nibbles_swapped, offset_forgotten, min_ignored, next_block };
std::pair<Problem, Inputs> misread(const Problem& p, const Inputs& in, Q4Fault f) {
  Problem r = p;
  Inputs x = in;
  if (f == Q4Fault::nibbles_swapped)
    for (Tensor* t : {&x.k, &x.v})
      for (int64_t n = 0; n < t->numel(); ++n) {
        const auto byte = static_cast<int>(t->get_offset(n));
        t->set_offset(n, byte % 16 * 16 + byte / 16);
      }
  if (f == Q4Fault::offset_forgotten || f == Q4Fault::min_ignored) {  // d q: q4_1 with m = 0
    r.kv_dtype = x.k.dtype = x.v.dtype = DType::q4_1;
    x.k_min = make_kv_scale(p, 1), x.v_min = make_kv_scale(p, 2);
  }
  if (f == Q4Fault::next_block)
    for (std::optional<Tensor>* s : {&x.k_scale, &x.v_scale, &x.k_min, &x.v_min}) {
      if (!*s) continue;
      const Tensor& src = **(s == &x.k_scale   ? &in.k_scale
                             : s == &x.v_scale ? &in.v_scale
                             : s == &x.k_min   ? &in.k_min
                                               : &in.v_min);
      const int64_t blocks = src.shape[3], per_head = src.shape[2] * blocks;
      for (int64_t n = 0; n + 1 < src.numel(); ++n)  // a token's last block reads the next token's first
        if ((n + 1) % per_head != 0) (*s)->set_offset(n, src.get_offset(n + 1));
    }
  return {r, x};
}

TEST(KvQ4, ImplementationsMatchTheReferenceAndMisreadCachesAreCaught) {
  for (const char* name : {"reference", "cpu", "cpu-flash"})
    for (DType c : {DType::q4_0, DType::q4_1})
      for (DType q : {DType::f32, DType::f16, DType::bf16}) {
        Problem p = q4_problem(q, c);
        p.layout = q == DType::bf16 ? Layout::BSHD : Layout::BHSD;
        if (q == DType::f16) p.Lq = 1;
        const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
        Outputs out;
        ASSERT_TRUE(run_impl(*find_impl(name), p, in, out).ok) << name << " " << p.name();
        const Verdict v = judge(p, expected_attention(p, in), out);
        EXPECT_TRUE(v.pass) << name << " " << p.name() << ": " << v.worst().describe();
        const Q4Fault own = c == DType::q4_0 ? Q4Fault::offset_forgotten : Q4Fault::min_ignored;
        for (Q4Fault f : {Q4Fault::nibbles_swapped, own, Q4Fault::next_block}) {
          const auto [r, x] = misread(p, in, f);
          EXPECT_FALSE(judge(r, expected_attention(r, x), out).pass) << name << " " << p.name() << " " << int(f);
        }
      }
}

TEST(KvQ4, HostileFieldsAreRefusedNamingThem) {
  const Problem p = q4_problem(DType::f16, DType::q4_1);
  const Inputs good = gen::generate_inputs(p, gen::Distribution::normal, 1);
  EXPECT_EQ(input_message(p, good), "accepted");
  const int64_t at[4] = {1, 0, 3, 1};
  for (double bad : {0.0, std::numeric_limits<double>::quiet_NaN(), -0.5}) {
    Inputs in = good;
    in.k_scale->set(at, bad);
    EXPECT_NE(input_message(p, in).find("k_scale[1,0,3,1] must be finite and > 0"), std::string::npos)
        << input_message(p, in);
  }
  Inputs nan_min = good;
  nan_min.k_min->set(at, std::numeric_limits<double>::quiet_NaN());
  EXPECT_NE(input_message(p, nan_min).find("k_min[1,0,3,1] must be finite"), std::string::npos)
      << input_message(p, nan_min);
  Inputs no_min = good;
  no_min.v_min.reset();
  EXPECT_NE(input_message(p, no_min).find("k_min/v_min"), std::string::npos) << input_message(p, no_min);
  // q4_0: llama.cpp's d = max / -8 is signed, so a negative d is a value; 0 and NaN are not.
  const Problem p0 = q4_problem(DType::f16, DType::q4_0);
  const Inputs good0 = gen::generate_inputs(p0, gen::Distribution::normal, 1);
  Inputs neg = good0;
  neg.k_scale->set(at, -0.5);
  EXPECT_EQ(input_message(p0, neg), "accepted");
  for (double bad : {0.0, std::numeric_limits<double>::quiet_NaN()}) {
    Inputs in = good0;
    const int64_t v_at[4] = {1, 0, 3, 0};  // Dv = 32: one block per token
    in.v_scale->set(v_at, bad);
    EXPECT_NE(input_message(p0, in).find("v_scale[1,0,3,0] must be finite and nonzero"), std::string::npos)
        << input_message(p0, in);
  }
  Inputs extra = good0;
  extra.k_min = good.k_min, extra.v_min = good.v_min;
  EXPECT_NE(input_message(p0, extra).find("takes no k_min and v_min"), std::string::npos) << input_message(p0, extra);
  Problem q = p;
  q.Dqk = 48;  // not whole blocks
  EXPECT_NE(validation_message(q).find("kv_block must divide Dqk and Dv"), std::string::npos) << validation_message(q);
  q = p, q.kv_block = 16;
  EXPECT_NE(validation_message(q).find("kv_dtype=q4_1 needs kv_scales=block and kv_block=32"), std::string::npos)
      << validation_message(q);
  q = p, q.kv_scales = KvScales::token;
  EXPECT_NE(validation_message(q).find("kv_block=32"), std::string::npos) << validation_message(q);
  q = p, q.kv_scale_dtype = DType::f32;
  EXPECT_NE(validation_message(q).find("kv_dtype=q4_1 needs kv_scale_dtype=fp16"), std::string::npos)
      << validation_message(q);
  EXPECT_EQ(parse_name(p.name()).name(), p.name());
  EXPECT_NE(p.short_name().find("kv-q4_1-block32-f16s"), std::string::npos) << p.short_name();
}

TEST(KvQ4, AFixtureRoundTripsAndBackendsWithoutTheFeatureAreNeverOfferedIt) {
  const Problem p = q4_problem(DType::bf16, DType::q4_1);
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 2);
  const std::string path = (std::filesystem::temp_directory_path() / "attncheck_kv_q4_roundtrip.h5").string();
  write_fixture(path, make_fixture("kv-q4", p, in, Provenance{}));
  const Fixture f = read_fixture(path);
  std::filesystem::remove(path);
  EXPECT_EQ(f.problem.name(), p.name());
  EXPECT_EQ(f.inputs.k.bytes, in.k.bytes);
  EXPECT_EQ(f.inputs.v_min->bytes, in.v_min->bytes);
  EXPECT_EQ(f.expected.out, reference_attention(p, in).out);
  // The example plugin lists kv_quant (8-bit codes) but has no way to take 4-bit ones.
  const Problem f32 = q4_problem(DType::f32, DType::q4_0);
  const Support s = load_plugin(EXAMPLE_PLUGIN_PATH)->supports(f32);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("4-bit KV cache codes (q4_0 / q4_1) not supported"), std::string::npos) << s.reason;
  EXPECT_TRUE(find_impl("cpu-flash")->supports(p).ok);
  EXPECT_TRUE(find_impl("reference")->supports(p).ok);
}

}  // namespace
}  // namespace attncheck
