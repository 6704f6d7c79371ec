// Absorbed MLA (mla.hpp): v is the first Dv columns of the latent cache k. The absorbed problem is the expanded
// multi-head one (per-head keys and values from up-projections of the latent) with the projections moved onto q and
// out, computed here from the definition; generated and stored inputs tie v to k (a fixture stores k alone);
// cpu, cpu-flash and the reference pass, and outputs of a kernel that reads V from the wrong columns or with the
// absorbed head dim's scale fail; inconsistent problems and inputs are refused naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "attncheck/fixture.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/mla.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "impl_check.hpp"

namespace attncheck {
namespace {

// A small absorbed MLA problem: one latent head of dc + dr columns, V its first dc.
Problem mla_problem(DType t, int64_t dc = 16, int64_t dr = 8) {
  Problem p;
  p.dtype = t, p.B = 2, p.Hq = 4, p.Hkv = 1, p.Lq = 7, p.Lk = 23, p.Dqk = dc + dr, p.Dv = dc, p.want_lse = true;
  p.causal = true, p.alignment = Alignment::bottom_right, p.key_lengths = {23, 15};
  p.mla = true, p.scale = 1.0 / std::sqrt(12.0);  // a 4 + 8 head before absorption
  return p;
}

// Absorbed = expanded. Per head h: the expanded attention reads keys [c W_UK_h^T | k_pe] and values c W_UV_h^T of
// the latent rows c; absorbed, q_h's nope part times W_UK_h reads the latent itself, and out times W_UV_h^T gives
// the head's output. Both run through the fp64 reference; the products are formed here in double.
TEST(Mla, AbsorbedEqualsExpanded) {
  const int64_t H = 3, Lq = 5, Lk = 11, dn = 6, dr = 4, dc = 10, dv = 7;
  std::mt19937_64 g(11);
  std::normal_distribution<double> n01;
  auto draw = [&](int64_t n) {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& e : x) e = n01(g);
    return x;
  };
  const std::vector<double> qn = draw(H * Lq * dn), qr = draw(H * Lq * dr), c = draw(Lk * dc), kr = draw(Lk * dr),
                            wuk = draw(H * dn * dc), wuv = draw(H * dv * dc);
  const double scale = 1.0 / std::sqrt(double(dn + dr));

  Problem ex;  // expanded: H heads of Dqk dn + dr, Dv dv
  ex.dtype = DType::f64, ex.B = 1, ex.Hq = ex.Hkv = H, ex.Lq = Lq, ex.Lk = Lk, ex.Dqk = dn + dr, ex.Dv = dv;
  ex.causal = true, ex.alignment = Alignment::bottom_right, ex.scale = scale, ex.want_lse = true;
  Inputs ei{make_qkv(ex, 0), make_qkv(ex, 1), make_qkv(ex, 2), {}, {}, {}, {}, {}};
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < Lq; ++i) {
      for (int64_t d = 0; d < dn; ++d) ei.q.put(0, h, i, d, qn[size_t((h * Lq + i) * dn + d)]);
      for (int64_t d = 0; d < dr; ++d) ei.q.put(0, h, i, dn + d, qr[size_t((h * Lq + i) * dr + d)]);
    }
    for (int64_t j = 0; j < Lk; ++j) {
      for (int64_t d = 0; d < dn; ++d) {
        double s = 0;
        for (int64_t e = 0; e < dc; ++e) s += c[size_t(j * dc + e)] * wuk[size_t((h * dn + d) * dc + e)];
        ei.k.put(0, h, j, d, s);
      }
      for (int64_t d = 0; d < dr; ++d) ei.k.put(0, h, j, dn + d, kr[size_t(j * dr + d)]);
      for (int64_t d = 0; d < dv; ++d) {
        double s = 0;
        for (int64_t e = 0; e < dc; ++e) s += c[size_t(j * dc + e)] * wuv[size_t((h * dv + d) * dc + e)];
        ei.v.put(0, h, j, d, s);
      }
    }
  }

  Problem ab = ex;  // absorbed: one latent head [c | k_pe], V = c
  ab.Hkv = 1, ab.Dqk = dc + dr, ab.Dv = dc, ab.mla = true;
  Inputs ai{make_qkv(ab, 0), make_qkv(ab, 1), make_qkv(ab, 2), {}, {}, {}, {}, {}};
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < Lq; ++i) {
      for (int64_t e = 0; e < dc; ++e) {
        double s = 0;
        for (int64_t d = 0; d < dn; ++d) s += qn[size_t((h * Lq + i) * dn + d)] * wuk[size_t((h * dn + d) * dc + e)];
        ai.q.put(0, h, i, e, s);
      }
      for (int64_t d = 0; d < dr; ++d) ai.q.put(0, h, i, dc + d, qr[size_t((h * Lq + i) * dr + d)]);
    }
  for (int64_t j = 0; j < Lk; ++j) {
    for (int64_t e = 0; e < dc; ++e) ai.k.put(0, 0, j, e, c[size_t(j * dc + e)]);
    for (int64_t d = 0; d < dr; ++d) ai.k.put(0, 0, j, dc + d, kr[size_t(j * dr + d)]);
  }
  tie_latent_values(ab, ai);

  const ExpectedAttention re = expected_attention(ex, ei), ra = expected_attention(ab, ai);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < Lq; ++i) {
      const size_t row = size_t(h * Lq + i);
      EXPECT_NEAR(ra.lse[row], re.lse[row], 1e-12 * std::abs(re.lse[row]) + 1e-12) << "h " << h << " i " << i;
      for (int64_t d = 0; d < dv; ++d) {
        double o = 0;  // the latent output projected up by W_UV_h
        for (int64_t e = 0; e < dc; ++e) o += ra.out[row * size_t(dc) + size_t(e)] * wuv[size_t((h * dv + d) * dc + e)];
        EXPECT_NEAR(o, re.out[row * size_t(dv) + size_t(d)], 1e-11) << "h " << h << " i " << i << " d " << d;
      }
    }
}

TEST(Mla, GeneratedAndStoredValuesAreTheLatentCachesFirstColumns) {
  for (const bool paged : {false, true}) {
    Problem p = mla_problem(DType::bf16);
    if (paged) p.Lq = 2, p.page_size = 5, p.num_pages = 11, p.block_table = {3, 7, 0, 9, 10, 2, 1, 8, 5, 4};
    const Inputs in = gen::generate_inputs(p, gen::Distribution::poison_masked, 3);
    ASSERT_EQ(in.v.shape.back(), p.Dv);
    int64_t idx[4] = {0, 0, 0, 0};
    for (idx[0] = 0; idx[0] < in.v.shape[0]; ++idx[0])
      for (idx[2] = 0; idx[2] < in.v.shape[2]; ++idx[2])
        for (idx[3] = 0; idx[3] < p.Dv; ++idx[3]) {
          const double v = in.v.get(idx), k = in.k.get(idx);
          ASSERT_TRUE(v == k || (std::isnan(v) && std::isnan(k))) << p.name();
        }
    // A fixture stores k alone and reads v back from it.
    const std::string path =
        (std::filesystem::temp_directory_path() / ("attncheck_mla_" + std::to_string(paged) + ".h5")).string();
    write_fixture(path, make_fixture(p.name(), p, in, Provenance{}));
    const Fixture f = read_fixture(path);
    EXPECT_EQ(f.inputs.v.bytes, in.v.bytes) << p.name();
    EXPECT_EQ(f.inputs.v.strides, in.v.strides) << p.name();
    EXPECT_TRUE(f.problem.mla);
    std::remove(path.c_str());
  }
}

TEST(Mla, CpuAndCpuFlashPassAndMisreadValuesFail) {
  std::vector<Problem> problems;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) problems.push_back(mla_problem(t));
  // DeepSeek-V3's latent and rope dims and 128 heads, decode (cpu-flash: the heads as the rows of one latent
  // tile, keys split over three key blocks)
  Problem deepseek = mla_problem(DType::bf16, 512, 64);
  deepseek.B = 1, deepseek.Hq = 128, deepseek.Lq = 1, deepseek.Lk = 300, deepseek.key_lengths = {300};
  deepseek.scale = 1.0 / std::sqrt(192.0);
  problems.push_back(deepseek);
  // The same outputs judged against the problem whose V is the cache's last Dv columns fail.
  expect_impls_match_reference(problems, [](Problem p) {
    p.scale = 1.0 / std::sqrt(double(p.Dqk));  // the absorbed head dim's scale
    return p;
  });
  for (const Problem& p : problems) {
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
    Inputs wrong = in;  // V from the k_pe end of the cache
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t j = 0; j < p.Lk; ++j)
        for (int64_t e = 0; e < p.Dv; ++e) wrong.v.put(b, 0, j, e, in.k.at(b, 0, j, p.Dqk - p.Dv + e));
    Problem plain = p;
    plain.mla = false;
    const ImplPtr cpu = find_impl("cpu");
    Outputs out;
    ASSERT_TRUE(run_impl(*cpu, plain, wrong, out).ok);
    EXPECT_FALSE(judge(p, expected_attention(p, in), out).pass) << p.name();
  }
}

TEST(Mla, InconsistentProblemsAndValuesAreRefusedNamingTheField) {
  Problem p = mla_problem(DType::f32);
  p.Dv = p.Dqk + 8;
  EXPECT_NE(validation_message(p).find("mla: v is the first Dv columns of k, so Dv must be <= Dqk"), std::string::npos)
      << validation_message(p);
  p = mla_problem(DType::f32);
  p.past_len = 3;
  EXPECT_NE(validation_message(p).find("mla: KV-cache append"), std::string::npos) << validation_message(p);
  p = mla_problem(DType::f16);
  p.kv_scales = KvScales::head;
  EXPECT_NE(validation_message(p).find("mla: a quantized latent cache"), std::string::npos) << validation_message(p);
  p = mla_problem(DType::e4m3);
  p.descale_k = 0.5, p.descale_v = 0.25;
  EXPECT_NE(validation_message(p).find("descale_v must equal descale_k"), std::string::npos) << validation_message(p);

  p = mla_problem(DType::f32);
  Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 2);
  in.v.put(1, 0, 4, 3, in.v.at(1, 0, 4, 3) + 1.0);
  try {
    validate(p, in);
    ADD_FAILURE() << "a v that is not k's first columns was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("v[1,0,4,3]"), std::string::npos) << e.what();
  }
}

TEST(Mla, NamesRoundTripAndUndeclaringBackendsAreNotOffered) {
  const Problem p = mla_problem(DType::bf16);
  EXPECT_NE(p.name().find("mla"), std::string::npos) << p.name();
  EXPECT_TRUE(parse_name(p.name()).mla);
  Capabilities c = find_impl("cpu")->capabilities();
  c.mla = false;
  const Support s = check_capabilities(c, p);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("absorbed MLA"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace attncheck
