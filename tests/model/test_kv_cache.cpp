// Quantized KV caches (int8, fp8 e4m3/e5m2 codes with per-tensor, per-(batch, KV head), per-token and per-block
// scales): the producer's scales differ group by group, the reference of a quantized cache is the reference of the
// float cache holding scale * code (computed here, in the test), cpu and cpu-flash match it bit for bit where those
// products are exact in fp32 and within tolerance everywhere, kernels that ignore the scales or read another
// group's scales are caught, hostile scales and block sizes are refused naming the field, and backends that do not
// declare the feature (the example plugin, workers) are never offered it.
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

const KvScales kGrains[] = {KvScales::tensor, KvScales::head, KvScales::token, KvScales::block};
const DType kCodes[] = {DType::i8, DType::e4m3, DType::e5m2};

Problem kv_problem(DType q, DType codes, KvScales g, DType scale_dtype = DType::f32) {
  Problem p;
  p.dtype = q, p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 5, p.Lk = 19, p.Dqk = 64, p.Dv = 32, p.want_lse = true;
  p.kv_scales = g, p.kv_dtype = codes, p.kv_scale_dtype = scale_dtype;
  return p;
}

// The scale of element (b, h, j, d), indexed by hand from the granularity's definition.
double scale_of(const Problem& p, const Tensor& s, int64_t b, int64_t h, int64_t j, int64_t d) {
  const bool whole = p.kv_scales == KvScales::tensor,
             per_token = p.kv_scales == KvScales::token || p.kv_scales == KvScales::block;
  const int64_t g[4] = {whole ? 0 : b, whole ? 0 : h, per_token ? j : 0,
                        p.kv_scales == KvScales::block ? d / p.kv_block : 0};
  return s.get(g);
}

// The float cache the quantized one stands for, built here from the codes and scales (not by dequantize_kv):
// q, k, v in `to` with k = code * scale of its group, indexed by hand.
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
          for (int64_t d = 0; d < t.shape[3]; ++d) t.put(b, h, j, d, codes.at(b, h, j, d) * scale_of(p, s, b, h, j, d));
    (which == 1 ? x.k : x.v) = std::move(t);
  }
  return {f, x};
}

TEST(KvCache, ProducerScalesAreNonUniformNonUnitAndTheCodesDecodeToTheValues) {
  for (DType c : kCodes)
    for (KvScales g : kGrains) {
      const Problem p = kv_problem(DType::f32, c, g, DType::f16);
      const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 3);
      ASSERT_TRUE(in.k_scale && in.v_scale);
      EXPECT_EQ(in.k.dtype, c);
      EXPECT_EQ(in.k_scale->shape, kv_scale_shape(p, 1));
      EXPECT_EQ(in.v_scale->shape, kv_scale_shape(p, 2));
      std::set<double> distinct;
      for (int64_t n = 0; n < in.k_scale->numel(); ++n) {
        const double s = in.k_scale->get_offset(n);
        EXPECT_NE(s, 1.0);
        distinct.insert(s);
      }
      if (g != KvScales::tensor) {
        EXPECT_GT(distinct.size(), 1u) << to_string(g);
      }
      // every code in range and the quantisation error of each value at most half a code step (int8) or the
      // format's relative step (fp8) times the scale
      const Problem plain = [&] {
        Problem q = p;
        q.kv_scales = KvScales::none, q.kv_dtype = DType::i8, q.kv_scale_dtype = DType::f32;
        return q;
      }();
      const Inputs values = gen::generate_inputs(plain, gen::Distribution::normal, 3);
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hkv; ++h)
          for (int64_t j = 0; j < p.Lk; ++j)
            for (int64_t d = 0; d < p.Dqk; ++d) {
              const double code = in.k.at(b, h, j, d), x = values.k.at(b, h, j, d);
              const double scale = scale_of(p, *in.k_scale, b, h, j, d);
              ASSERT_LE(std::abs(code), kv_code_max(c));
              // int8: half a step; fp8: half an ulp of the code (relative u), or half the subnormal spacing
              const double bound =
                  c == DType::i8 ? 0.5 * scale
                                 : unit_roundoff(c) * std::abs(x) + scale * (c == DType::e4m3 ? 0x1p-10 : 0x1p-17);
              EXPECT_LE(std::abs(code * scale - x), bound) << b << h << j << d;
            }
    }
}

TEST(KvCache, QuantizedCacheEqualsTheFloatCacheOfScaleTimesCodeBitwise) {
  for (DType c : kCodes)
    for (KvScales g : kGrains)
      for (DType q : {DType::f32, DType::bf16}) {
        Problem p = kv_problem(q, c, g);
        p.causal = true, p.alignment = Alignment::bottom_right, p.key_lengths = {19, 11};
        const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 7);
        const Attended f = float_cache(p, in, DType::f64);
        const ExpectedAttention a = expected_attention(p, in), b = expected_attention(f.p, f.in);
        EXPECT_EQ(a.out, b.out) << p.name();
        EXPECT_EQ(a.lse, b.lse) << p.name();
      }
  // cpu and cpu-flash: with fp16 scales every scale * code is exact in fp32, so the quantized cache and the fp32
  // cache holding those products give the same bits. Decode (Lq = 1) too, where cpu-flash reads the codes in place
  // and dequantises them in registers, with blocks of 32 (a scale per vector) and of 8 (a scale per lane).
  for (const char* name : {"cpu", "cpu-flash"})
    for (DType c : kCodes)
      for (KvScales g : kGrains)
        for (int64_t lq : {5, 1})
          for (int64_t block : {32, 8}) {
            if (block != 32 && g != KvScales::block) continue;
            Problem p = kv_problem(DType::f32, c, g, DType::f16);
            p.Lq = lq, p.kv_block = block;
            const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 9);
            const Attended f = float_cache(p, in, DType::f32);
            Outputs a, b;
            ASSERT_TRUE(run_impl(*find_impl(name), p, in, a).ok) << name << " " << p.name();
            ASSERT_TRUE(run_impl(*find_impl(name), f.p, f.in, b).ok) << name;
            EXPECT_EQ(a.out.bytes, b.out.bytes) << name << " " << p.name();
            EXPECT_EQ(a.lse->bytes, b.lse->bytes) << name << " " << p.name();
          }
}

// Scales a kernel might read instead of the right ones: all ones (the scales ignored) or another group's.
enum class ScaleFault { ignored, batch0, block0 };
Inputs with_fault(const Problem& p, Inputs in, ScaleFault f) {
  for (std::optional<Tensor>* s : {&in.k_scale, &in.v_scale}) {
    Tensor t = **s;
    for (int64_t b = 0; b < t.shape[0]; ++b)
      for (int64_t h = 0; h < t.shape[1]; ++h)
        for (int64_t j = 0; j < t.shape[2]; ++j)
          for (int64_t e = 0; e < t.shape[3]; ++e) {
            const int64_t at[4] = {b, h, j, e};
            const int64_t from[4] = {f == ScaleFault::batch0 ? 0 : b, h, j, f == ScaleFault::block0 ? 0 : e};
            t.set(at, f == ScaleFault::ignored ? 1.0 : (*s)->get(from));
          }
    **s = std::move(t);
  }
  (void)p;
  return in;
}

TEST(KvCache, ImplementationsMatchTheReferenceAndWrongScalesAreCaught) {
  for (const char* name : {"reference", "cpu", "cpu-flash"})
    for (DType c : kCodes)
      for (KvScales g : kGrains)
        for (DType q : {DType::f32, DType::f16, DType::bf16}) {
          Problem p = kv_problem(q, c, g, q == DType::f16 ? DType::f16 : DType::f32);
          p.layout = q == DType::bf16 ? Layout::BSHD : Layout::BHSD;
          if (q == DType::f16) p.Lq = 1;  // decode: cpu-flash dequantises the codes in registers
          const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
          Outputs out;
          const ImplPtr impl = find_impl(name);
          ASSERT_TRUE(run_impl(*impl, p, in, out).ok) << name << " " << p.name();
          EXPECT_EQ(out.out.dtype, q);
          const Verdict v = judge(p, expected_attention(p, in), out);
          EXPECT_TRUE(v.pass) << name << " " << p.name() << ": " << v.worst().describe();
          // the same outputs judged against wrongly read scales must fail (guard against passing by accident)
          std::vector<ScaleFault> faults = {ScaleFault::ignored};
          if (g != KvScales::tensor) faults.push_back(ScaleFault::batch0);
          if (g == KvScales::block) faults.push_back(ScaleFault::block0);
          for (ScaleFault f : faults) {
            const Inputs wrong = with_fault(p, in, f);
            EXPECT_FALSE(judge(p, expected_attention(p, wrong), out).pass)
                << name << " " << p.name() << " fault " << int(f);
          }
        }
}

TEST(KvCache, HostileScalesAndShapesAreRefusedNamingTheField) {
  const Problem p = kv_problem(DType::f16, DType::i8, KvScales::block, DType::f16);
  const Inputs good = gen::generate_inputs(p, gen::Distribution::normal, 1);
  EXPECT_EQ(input_message(p, good), "accepted");
  for (double bad : {0.0, std::numeric_limits<double>::quiet_NaN(), -0.5, std::numeric_limits<double>::infinity()}) {
    Inputs in = good;
    const int64_t at[4] = {1, 0, 3, 0};  // Dv = 32: one block per token
    in.v_scale->set(at, bad);
    const std::string m = input_message(p, in);
    EXPECT_NE(m.find("v_scale[1,0,3,0]"), std::string::npos) << m;
  }
  Problem q = p;
  q.kv_block = 24;  // does not divide Dqk = 64
  EXPECT_NE(validation_message(q).find("kv_block must divide Dqk and Dv"), std::string::npos) << validation_message(q);
  q = p, q.kv_scales = KvScales::token, q.kv_block = 16;
  EXPECT_NE(validation_message(q).find("kv_block"), std::string::npos) << validation_message(q);
  q = p, q.kv_dtype = DType::f16;
  EXPECT_NE(validation_message(q).find("kv_dtype"), std::string::npos) << validation_message(q);
  q = p, q.kv_scale_dtype = DType::e4m3;
  EXPECT_NE(validation_message(q).find("kv_scale_dtype"), std::string::npos) << validation_message(q);
  q = p, q.dtype = DType::e4m3;
  EXPECT_NE(validation_message(q).find("kv_scales"), std::string::npos) << validation_message(q);
  q = p, q.past_len = 3;
  EXPECT_NE(validation_message(q).find("past_len"), std::string::npos) << validation_message(q);
  q = p, q.rotary_dim = 16;
  EXPECT_NE(validation_message(q).find("rotary_dim=16"), std::string::npos) << validation_message(q);
  q = Problem{}, q.kv_dtype = DType::e5m2;  // a code format without a quantized cache
  EXPECT_NE(validation_message(q).find("kv_scales"), std::string::npos) << validation_message(q);
  Inputs missing = good;
  missing.k_scale.reset();
  EXPECT_NE(input_message(p, missing).find("k_scale"), std::string::npos) << input_message(p, missing);
  Inputs wrong_shape = good;
  wrong_shape.k_scale = Tensor(DType::f16, {2, 2, 19, 4});  // blocks of 16, not 32
  EXPECT_NE(input_message(p, wrong_shape).find("k_scale shape"), std::string::npos) << input_message(p, wrong_shape);
  EXPECT_EQ(parse_name(p.name()).name(), p.name());
  EXPECT_NE(p.short_name().find("kv-int8-block32-f16s"), std::string::npos) << p.short_name();
}

TEST(KvCache, AFixtureRoundTripsAndBackendsWithoutTheFeatureAreNeverOfferedIt) {
  const Problem p = kv_problem(DType::bf16, DType::e4m3, KvScales::head);
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 2);
  const std::string path = (std::filesystem::temp_directory_path() / "attncheck_kv_cache_roundtrip.h5").string();
  write_fixture(path, make_fixture("kv", p, in, Provenance{}));
  const Fixture f = read_fixture(path);
  std::filesystem::remove(path);
  EXPECT_EQ(f.problem.name(), p.name());
  EXPECT_EQ(f.inputs.k.bytes, in.k.bytes);
  EXPECT_EQ(f.inputs.v_scale->bytes, in.v_scale->bytes);
  EXPECT_EQ(f.expected.out, expected_attention(p, in).out);
  // A plugin built before the cache's extension (tag 14) is never offered one; the example, which lists kv_quant, is.
  const Problem f32 = kv_problem(DType::f32, DType::e4m3, KvScales::head);  // a dtype both take
  const Support s = load_plugin(V1_PLUGIN_PATH)->supports(f32);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("quantized KV cache"), std::string::npos) << s.reason;
  EXPECT_TRUE(load_plugin(EXAMPLE_PLUGIN_PATH)->supports(f32).ok);
  EXPECT_TRUE(find_impl("cpu-flash")->supports(p).ok);
}

}  // namespace
}  // namespace attncheck
