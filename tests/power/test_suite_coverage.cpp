// The golden suite: every pair of feature values is covered by at least two fixtures, no two fixtures
// share a generated row, and each hazard distribution plants what generate.hpp promises.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "attncheck/reference.hpp"
#include "attncheck/suite.hpp"

namespace attncheck {
namespace {

SuiteSpec suite() { return read_suite(std::string(GOLDEN_DIR) + "/suite.json"); }

// The feature values of one case: factor name -> values present (a case may combine several mask kinds).
std::map<std::string, std::set<std::string>> features(const CaseSpec& c) {
  const Problem& p = c.problem;
  std::map<std::string, std::set<std::string>> f;
  auto& mask = f["mask"];
  if (p.causal) mask.insert("causal");
  if (p.window_left >= 0 || p.window_right >= 0) mask.insert("window");
  if (p.mask_shape) mask.insert("bool");
  if (!p.key_lengths.empty()) mask.insert("padding");
  if (mask.empty()) mask.insert("none");
  f["bias"] = {p.bias_shape ? "bias" : "no-bias"};
  f["softcap"] = {p.softcap > 0 ? "softcap" : "no-softcap"};
  f["dropout"] = {p.dropout_p > 0 ? "dropout" : "no-dropout"};
  f["heads"] = {p.Hq == p.Hkv ? "mha" : "gqa"};
  f["dtype"] = {to_string(p.dtype)};
  f["layout"] = {to_string(p.layout)};
  // The fully-masked policy is a feature only where a row has no visible key (lse -inf, or the finite fill's).
  const ReferenceResult r = reference_attention(p, gen::generate_inputs(p, c.distribution, c.seed));
  const double fill_lse = p.fill == MaskFill::finite ? p.fill_value + std::log(static_cast<double>(p.Lk)) : -INFINITY;
  for (double l : r.lse)
    if (l == fill_lse || std::abs(l - fill_lse) <= 1e-12 * std::abs(fill_lse))
      f["policy"] = {to_string(p.fully_masked)};
  return f;
}

TEST(GoldenSuite, EveryPairOfFeatureValuesIsCoveredTwice) {
  const SuiteSpec s = suite();
  std::map<std::string, std::set<std::string>> values;  // every value each factor takes somewhere
  std::map<std::string, int> pairs;                     // "factor=value|factor=value" -> fixtures
  for (const auto& c : s.cases) {
    const auto f = features(c);
    for (const auto& [k, vs] : f) values[k].insert(vs.begin(), vs.end());
    for (const auto& [k1, v1s] : f)
      for (const auto& [k2, v2s] : f)
        if (k1 < k2)
          for (const auto& v1 : v1s)
            for (const auto& v2 : v2s) ++pairs[k1 + "=" + v1 + "|" + k2 + "=" + v2];
  }
  EXPECT_EQ(values["policy"].size(), 3u);
  EXPECT_EQ(values["mask"].size(), 5u);
  EXPECT_EQ(values["dtype"].size(), 6u);  // fp64 fp32 fp16 bf16 fp8_e4m3 fp8_e5m2
  std::string missing;
  for (const auto& [k1, v1s] : values)
    for (const auto& [k2, v2s] : values)
      if (k1 < k2)
        for (const auto& v1 : v1s)
          for (const auto& v2 : v2s) {
            if ((k1 == "mask" && v1 == "none" && k2 == "policy")) continue;  // no masking: no fully masked row
            const std::string key = k1 + "=" + v1 + "|" + k2 + "=" + v2;
            if (pairs[key] < 2) missing += "  " + key + " (" + std::to_string(pairs[key]) + ")\n";
          }
  EXPECT_TRUE(missing.empty()) << "pairs covered by fewer than two fixtures:\n" << missing;
}

// Every suite: the committed ones (forward, backward, large) and the long tier generated on demand.
std::vector<CaseSpec> every_case() {
  std::vector<CaseSpec> all;
  for (const char* f : {"suite.json", "suite-backward.json", "suite-large.json", "suite-long.json"}) {
    SuiteSpec s = read_suite(std::string(GOLDEN_DIR) + "/" + f);
    for (auto& c : s.cases) {
      c.name = std::string(f) + ": " + c.name;
      all.push_back(std::move(c));
    }
  }
  return all;
}

TEST(GoldenSuite, NoTwoFixturesShareASeedOrAGeneratedQueryRow) {
  const std::vector<CaseSpec> cases = every_case();
  EXPECT_GT(cases.size(), 150u);
  std::set<uint64_t> seeds;
  std::map<std::vector<double>, std::string> rows;
  for (const auto& c : cases) {
    EXPECT_TRUE(seeds.insert(c.seed).second) << c.name << " reuses seed " << c.seed;
    const auto d = c.distribution;
    if (d != gen::Distribution::normal && d != gen::Distribution::uniform && d != gen::Distribution::large_logits)
      continue;  // the other distributions repeat values by design (ties, one-hot, constants)
    const Inputs in = gen::generate_inputs(c.problem, d, c.seed);
    const Problem& p = c.problem;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i) {
          std::vector<double> row;
          for (int64_t x = 0; x < p.Dqk; ++x) row.push_back(in.q.at(b, h, i, x));
          if (p.Dqk < 4) continue;  // too short to be unique by chance
          const auto [it, fresh] = rows.emplace(row, c.name);
          EXPECT_TRUE(fresh || it->second == c.name) << c.name << " repeats a query row of " << it->second;
        }
  }
}

// The committed golden/ stays small enough for a fast clone (at most 31 MiB); a new fixture must be tiny.
TEST(GoldenSuite, CommittedGoldenDirectoryIsAtMost31MiB) {
  uintmax_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(GOLDEN_DIR))
    if (e.is_regular_file()) bytes += e.file_size();
  EXPECT_GT(bytes, 1u << 20);  // the fixtures are there
  EXPECT_LE(bytes, 31u << 20) << GOLDEN_DIR << " holds " << bytes << " bytes";
}

Problem small(DType t, int64_t lk = 130) {
  Problem p;
  p.B = 1, p.Hq = 2, p.Hkv = 1, p.Lq = 5, p.Lk = lk, p.Dqk = 16, p.Dv = 8, p.dtype = t, p.want_lse = true;
  return p;
}

TEST(GoldenSuite, HazardDistributionsPlantWhatTheyPromise) {
  using gen::Distribution;
  {  // fp16_overflow: raw dot products beyond 65504, a finite softmax in fp16 inputs at scale 2^-13
    Problem p = small(DType::f16);
    p.scale = 0x1.0p-13;
    const Inputs in = gen::generate_inputs(p, Distribution::fp16_overflow, 1);
    int beyond = 0;
    for (int64_t j = 0; j < p.Lk; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < p.Dqk; ++d) dot += in.q.at(0, 0, 0, d) * in.k.at(0, 0, j, d);
      beyond += std::abs(dot) > 65504.0;
    }
    EXPECT_GT(beyond, p.Lk / 4);
    const ReferenceResult r = reference_attention(p, in);
    for (double x : r.out) EXPECT_TRUE(std::isfinite(x));
  }
  {  // logits_30_80: the row maxima are 30-80 in magnitude
    const Problem p = small(DType::f32);
    const ReferenceResult r = reference_attention(p, gen::generate_inputs(p, Distribution::logits_30_80, 2));
    for (double l : r.lse) EXPECT_TRUE(l > 30 && l < 200) << l;
  }
  {  // tile_edge_dominant: the keys at j % 64 in {0, 63} hold most of the weight
    Problem p = small(DType::f32);
    p.want_weights = true;
    const ReferenceResult r = reference_attention(p, gen::generate_inputs(p, Distribution::tile_edge_dominant, 3));
    double edge = 0;
    for (int64_t j = 0; j < p.Lk; ++j)
      if (j % 64 == 0 || j % 64 == 63) edge += r.weights[static_cast<size_t>(j)];
    EXPECT_GT(edge, 0.9);
  }
  {  // neg_inf_bias needs a bias; with one, row 0 is fully masked by the bias alone
    Problem p = small(DType::f32);
    EXPECT_THROW(gen::generate_inputs(p, Distribution::neg_inf_bias, 4), std::invalid_argument);
    p.bias_shape = std::array<int64_t, 4>{1, 2, 5, p.Lk};
    const ReferenceResult r = reference_attention(p, gen::generate_inputs(p, Distribution::neg_inf_bias, 4));
    EXPECT_EQ(r.lse[0], -INFINITY);
    EXPECT_TRUE(std::isfinite(r.lse[1]));
  }
  {  // one_hot_v: output column d is the total weight of the keys j with j % Dv == d; columns sum to 1
    const Problem p = small(DType::f32);
    const ReferenceResult r = reference_attention(p, gen::generate_inputs(p, Distribution::one_hot_v, 5));
    double sum = 0;
    for (int64_t d = 0; d < p.Dv; ++d) sum += r.out[static_cast<size_t>(d)];
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
  {  // near_ties: keys j and j + 3 differ, but by at most 2^-9 relative
    const Problem p = small(DType::f32);
    const Inputs in = gen::generate_inputs(p, Distribution::near_ties, 6);
    EXPECT_NE(in.k.at(0, 0, 0, 0), in.k.at(0, 0, 3, 0));
    EXPECT_NEAR(in.k.at(0, 0, 0, 0), in.k.at(0, 0, 3, 0), 0x1.0p-8 * std::abs(in.k.at(0, 0, 0, 0)));
  }
}

}  // namespace
}  // namespace attncheck
