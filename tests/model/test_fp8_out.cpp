// The fp8 output (cuDNN sdpa_fp8's O with scale_o and amax_o): the store rounds O * scale_o once and saturates,
// amax_o is max |O| before the scaling; cpu, cpu-flash and the reference as an implementation pass within the derived
// bound, and the epilogue bugs (scale_o ignored or inverted, amax in scale_o units or after the cast, no saturation)
// fail; hostile fields are refused naming the field; backends that do not declare the feature are never offered it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "attncheck/features.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/fp8_out.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "impl_check.hpp"

namespace attncheck {
namespace {

Problem out_problem(DType in, DType codes, double scale_o) {
  Problem p;
  p.dtype = in, p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 5, p.Lk = 37, p.Dqk = 32, p.Dv = 16, p.want_lse = true;
  p.fp8_out = true, p.o_dtype = codes, p.scale_o = scale_o;
  if (is_fp8(in)) p.descale_q = 0.75, p.descale_k = 1.25, p.descale_v = 0.625;
  return p;
}

// Values chosen by hand: scale_o = 3, e4m3 (3 mantissa bits, largest finite 448).
TEST(Fp8Out, TheStoreRoundsOnceSaturatesAndTakesAmaxBeforeTheScale) {
  Problem p;
  p.Dv = 5, p.fp8_out = true, p.o_dtype = DType::e4m3, p.scale_o = 3.0;
  Tensor values(DType::f64, {1, 1, 1, 5});
  const double o[5] = {0.5, 0.1, 200.0, -1000.0, -0.001};
  for (int d = 0; d < 5; ++d) values.put(0, 0, 0, d, o[d]);
  Outputs out = make_outputs(p);
  ASSERT_TRUE(out.amax_o);
  EXPECT_EQ(out.out.dtype, DType::e4m3);
  store_fp8_out(p, values, out);
  // 1.5 exact; 0.3 between 0.28125 and 0.3125, nearer 0.3125; 600 and -3000 saturate at +-448; -0.003 is below
  // e4m3's smallest normal 2^-6: a multiple of 2^-9, 1.536 steps, nearest -2 * 2^-9 = -0.00390625.
  const double want[5] = {1.5, 0.3125, 448.0, -448.0, -0.00390625};
  for (int d = 0; d < 5; ++d) EXPECT_EQ(out.out.at(0, 0, 0, d), want[d]) << d;
  EXPECT_EQ(out.amax_o->get_offset(0), 1000.0);  // before the scale: not 3000, not 448 / 3
  EXPECT_EQ(fp8_out_value(p, 448.0), 448.0 / 3.0);
  p.o_dtype = DType::e5m2;  // 2 mantissa bits, largest finite 57344: 0.3 -> 0.3125, 3000 -> 3072
  EXPECT_EQ(fp8_out_code(p, 0.1), 0.3125);
  EXPECT_EQ(fp8_out_code(p, -1000.0), -3072.0);
  EXPECT_EQ(fp8_out_code(p, 1e6), 57344.0);
  EXPECT_TRUE(std::isnan(fp8_out_code(p, std::nan(""))));
}

std::vector<Problem> problems() {
  std::vector<Problem> v{out_problem(DType::f32, DType::e4m3, 37.5), out_problem(DType::bf16, DType::e5m2, 1.0 / 3),
                         out_problem(DType::e4m3, DType::e4m3, 700.0),  // |O| * 700 beyond 448: saturates
                         out_problem(DType::f16, DType::e4m3, 96.0)};
  v[1].causal = true, v[1].alignment = Alignment::bottom_right, v[1].key_lengths = {37, 12};
  v[3].Lq = 1, v[3].sinks = {0.5, -1.0, 2.0, -HUGE_VAL};  // a decode
  return v;
}

TEST(Fp8Out, ImplementationsMatchTheReference) {
  expect_impls_match_reference(problems(), [](Problem p) {
    p.fp8_out = false, p.o_dtype = DType::e4m3, p.scale_o = 1.0;
    return p;
  });
  // The saturating problem does saturate, so the clamp is exercised.
  const Problem p = problems()[2];
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
  const double amax = fp8_out_amax(reference_attention(p, in).out);
  EXPECT_GT(amax * p.scale_o, 448.0);
}

enum class Bug { scale_ignored, scale_inverted, amax_scaled, amax_after_cast, no_saturation };

// The correct store of the reference's O, then one epilogue bug.
Outputs stored(const Problem& p, const std::vector<double>& o, std::optional<Bug> bug) {
  Outputs out = make_outputs(p);
  double amax = 0, amax_cast = 0;
  size_t n = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d) {
          const double x = o[n++];
          double code = fp8_out_code(p, x);
          if (bug == Bug::scale_ignored) code = fp8_out_code(p, x / p.scale_o);
          if (bug == Bug::scale_inverted) code = fp8_out_code(p, x / p.scale_o / p.scale_o);
          if (bug == Bug::no_saturation) code = round_to(p.o_dtype, x * p.scale_o);
          out.out.put(b, h, i, d, code);
          amax = std::max(amax, std::abs(x)), amax_cast = std::max(amax_cast, std::abs(code) / p.scale_o);
        }
  out.amax_o->set_offset(0, bug == Bug::amax_scaled       ? amax * p.scale_o
                            : bug == Bug::amax_after_cast ? amax_cast
                                                          : amax);
  if (p.want_lse) out.lse = Tensor(p.stat_dtype(), {p.B, p.Hq, p.Lq});
  return out;
}

TEST(Fp8Out, EpilogueBugsAreCaught) {
  for (const Problem& p : problems()) {
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
    const ExpectedAttention r = expected_attention(p, in);
    Outputs ok = stored(p, r.out, std::nullopt);
    for (int64_t n = 0; n < ok.lse->numel(); ++n) ok.lse->set_offset(n, r.lse[static_cast<size_t>(n)]);
    const Verdict good = judge(p, r, ok);
    EXPECT_TRUE(good.pass) << p.name() << ": " << good.worst().describe();
    for (Bug bug :
         {Bug::scale_ignored, Bug::scale_inverted, Bug::amax_scaled, Bug::amax_after_cast, Bug::no_saturation}) {
      if (bug == Bug::no_saturation && fp8_out_amax(r.out) * p.scale_o <= kv_code_max(p.o_dtype)) continue;
      // With fp8 inputs the bound of O (fp8 P and V) is wider than the output's own fp8 rounding, so an amax taken
      // after the cast (within u_8 of max |O|) is inside it (docs/tolerance.md "fp8 output").
      if (bug == Bug::amax_after_cast && is_fp8(p.dtype)) continue;
      Outputs o = stored(p, r.out, bug);
      o.lse = ok.lse;
      EXPECT_FALSE(judge(p, r, o).pass) << p.name() << " bug " << int(bug);
    }
    Outputs none = ok;
    none.amax_o.reset();
    const Verdict v = judge(p, r, none);
    EXPECT_FALSE(v.pass);
    EXPECT_EQ(v.worst().tensor, "amax_o");
  }
}

TEST(Fp8Out, HostileFieldsAreRefusedNamingTheField) {
  const Problem good = out_problem(DType::f32, DType::e4m3, 2.0);
  EXPECT_EQ(validation_message(good), "accepted");
  for (double s : {0.0, -2.0, std::nan(""), HUGE_VAL}) {
    Problem p = good;
    p.scale_o = s;
    EXPECT_NE(validation_message(p).find("scale_o must be finite and > 0"), std::string::npos)
        << s << ": " << validation_message(p);
  }
  Problem p = good;
  p.o_dtype = DType::f16;
  EXPECT_NE(validation_message(p).find("o_dtype must be fp8_e4m3 or fp8_e5m2"), std::string::npos)
      << validation_message(p);
  p = good, p.fp8_out = false;
  EXPECT_NE(validation_message(p).find("o_dtype and scale_o need fp8_out"), std::string::npos) << validation_message(p);
  p = good, p.fully_masked = FullyMasked::nan;
  EXPECT_NE(validation_message(p).find("fp8_out: fully_masked=nan"), std::string::npos) << validation_message(p);
  // The name carries the fields and reads back; a bad value in a name is refused naming the field.
  EXPECT_EQ(parse_name(good.name()).scale_o, 2.0);
  std::string bad = good.name();
  bad.replace(bad.find("scale_o=2"), 9, "scale_o=0");
  try {
    parse_name(bad);
    ADD_FAILURE() << bad << " accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("scale_o"), std::string::npos) << e.what();
  }
}

TEST(Fp8Out, AFixtureRoundTripsAndBackendsWithoutTheFeatureAreNeverOfferedIt) {
  const Problem p = out_problem(DType::bf16, DType::e5m2, 1.0 / 3);
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 2);
  const std::string path = (std::filesystem::temp_directory_path() / "attncheck_fp8_out_roundtrip.h5").string();
  write_fixture(path, make_fixture("fp8-out", p, in, Provenance{}));
  const Fixture f = read_fixture(path);
  std::filesystem::remove(path);
  EXPECT_EQ(f.problem.name(), p.name());
  EXPECT_EQ(f.expected.out, reference_attention(p, in).out);
  Problem f32 = p;
  f32.dtype = DType::f32;
  for (const char* plugin : {EXAMPLE_PLUGIN_PATH, V1_PLUGIN_PATH}) {
    const Support s = load_plugin(plugin)->supports(f32);
    EXPECT_FALSE(s.ok) << plugin;
    EXPECT_NE(s.reason.find("fp8 output"), std::string::npos) << s.reason;
  }
  EXPECT_TRUE(find_impl("cpu-flash")->supports(p).ok);
  EXPECT_FALSE(backward_modelled(p).ok);
}

}  // namespace
}  // namespace attncheck
