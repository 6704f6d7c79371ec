// Bug models must reach every problem where the bug shows: accumulation in the inputs' own 16-bit type (fp16
// accumulators on fp16 inputs, bf16 on bf16), keys never read where only lse fails (the keys held little weight),
// a softmax over the wrong axis on problems with fully masked rows (which follow the policy either way), a mask
// applied after the softmax where masked keys hold poison or rows are fully masked, and a failure that shows only
// in the weights (a key of weight 1e-13 never read), fully masked rows under the uniform or NaN policy. Each
// case was a miss of the full validation run (diagnose_validate golden/cases 1000 v); diagnosed from the outputs
// alone (no probes), so the models, not re-runs, must find the cause. And the RoPE faults of the power grid.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "attncheck/block_mask.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "diagnosis.hpp"
#include "mutants.hpp"
#include "power.hpp"
#include "subject.hpp"

namespace attncheck {
namespace {

std::string lines(const diagnose::Diagnosis& d) {
  std::string s;
  for (const std::string& l : d.text()) s += l + "\n";
  return s;
}

// A selftest mutant's failure on a golden fixture, diagnosed without re-runs.
diagnose::Diagnosis mutant_on(const std::string& mutant, const std::string& fixture) {
  const Fixture f = read_fixture(std::string(ATTNCHECK_GOLDEN_DIR) + "/" + fixture);
  for (const mutants::Entry& m : mutants::catalogue()) {
    if (m.impl->name() != mutant) continue;
    Outputs out;
    EXPECT_TRUE(run_impl(*m.impl, f.problem, f.inputs, out).ok);
    EXPECT_FALSE(judge(f.problem, f.expected, out, f.tolerance).pass) << mutant << " passes " << fixture;
    diagnose::Options o;
    o.tolerance = f.tolerance;
    return diagnose::diagnose({{}, f.problem, f.inputs}, f.expected, out, o);
  }
  ADD_FAILURE() << "no mutant " << mutant;
  return {};
}

// A detection-power fault on a grid problem (Lk 1024, 8 rows), diagnosed without re-runs.
diagnose::Diagnosis fault_on(const std::string& fault, DType t, power::Flavour fl, power::Logits lg) {
  const Problem p = power::grid_problem(1024, t, fl, 8);
  const Inputs in = power::grid_inputs(p, lg, 20261123);
  const ExpectedAttention ref = expected_attention(p, in);
  for (const power::Variant& v : power::fault_variants()) {
    if (v.name != fault) continue;
    const Outputs out = power::run_variant(v, p, in);
    EXPECT_FALSE(judge(p, ref, out).pass) << fault << " passes " << p.name();
    return diagnose::diagnose({{}, p, in}, ref, out, {});
  }
  ADD_FAILURE() << "no fault " << fault;
  return {};
}

// Fully masked rows under the uniform policy average V; with fp16 accumulators that average is rounded too.
TEST(ModelReach, AccumulationInFullyMaskedUniformRows) {
  for (const char* f : {"fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_pad-fm-uniform_normal_empty-batch.h5",
                        "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_pad-finite-fm-uniform_normal_empty-batch.h5"}) {
    const diagnose::Diagnosis d = mutant_on("fp16-accumulation", f);
    EXPECT_EQ(d.top(), "low-precision-accumulation") << f << "\n" << lines(d);
  }
}

TEST(ModelReach, AccumulationInTheInputsOwn16BitType) {
  for (const char* f :
       {"fp16_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5", "fp16_B2-Hq4-Hkv2-Lq13-Lk17-D16_causal-tl_normal.h5"}) {
    const diagnose::Diagnosis d = mutant_on("fp16-accumulation", f);
    EXPECT_EQ(d.top(), "low-precision-accumulation") << f << "\n" << lines(d);
  }
  for (power::Flavour fl : {power::Flavour::dense, power::Flavour::causal}) {
    const diagnose::Diagnosis d = fault_on("bf16-pv-acc", DType::bf16, fl, power::Logits::normal);
    EXPECT_EQ(d.top(), "low-precision-accumulation") << power::to_string(fl) << "\n" << lines(d);
  }
}

TEST(ModelReach, KeysNeverReadWhereOnlyLseFails) {
  for (DType t : {DType::f16, DType::bf16}) {
    const diagnose::Diagnosis d = fault_on("skip-tile", t, power::Flavour::dense, power::Logits::near_one_hot);
    EXPECT_EQ(d.top(), "skipped-keys") << to_string(t) << "\n" << lines(d);
    // near one-hot rows: every non-max tile holds about the same weight, so the tile's place is not claimed
    EXPECT_NE(lines(d).find("the place is not identified"), std::string::npos) << lines(d);
  }
  for (power::Flavour fl : {power::Flavour::dense, power::Flavour::window}) {
    const diagnose::Diagnosis d = fault_on("drop-random-key", DType::bf16, fl, power::Logits::hazard);
    EXPECT_EQ(d.top(), "skipped-keys") << power::to_string(fl) << "\n" << lines(d);
    EXPECT_NE(lines(d).find("never read (in every row)"), std::string::npos) << lines(d);
  }
}

TEST(ModelReach, SoftmaxOverQueriesWithFullyMaskedRows) {
  for (const char* f : {"fp32_B2-Hq4-Hkv2-Lq17-Lk5-D16_causal-br-fm-nan_normal.h5",
                        "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_pad-fm-uniform_normal_empty-batch.h5",
                        // a finite fill: masked keys take part in each key's softmax over the queries
                        "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_pad-finite-fm-uniform_normal_empty-batch.h5"}) {
    const diagnose::Diagnosis d = mutant_on("softmax-wrong-axis", f);
    EXPECT_EQ(d.top(), "softmax-axis") << f << "\n" << lines(d);
  }
}

// The softmax over every key reads the poison of masked keys, so the rows are NaN, as they are for a kernel that
// ignores the mask (mask-ignored, key-padding, the other causal alignment). The weights tell them apart: this bug
// zeroes the masked keys' weights, those read them. Fully masked rows follow the policy (before: scaled to 0).
TEST(ModelReach, MaskAfterSoftmaxWithPoisonedOrFullyMaskedRows) {
  for (const char* f :
       {"fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_pad_poison_masked.h5", "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_mask_poison_masked.h5",
        "fp32_B2-Hq4-Hkv2-Lq5-Lk17-D16_causal-tl_poison_masked.h5",
        "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_pad-fm-uniform_normal_empty-batch.h5",
        // a finite fill gives fully masked rows a finite lse; they still follow the policy
        "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_pad-finite-fm-uniform_normal_empty-batch.h5"}) {
    const diagnose::Diagnosis d = mutant_on("mask-after-softmax", f);
    EXPECT_EQ(d.top(), "mask-after-softmax") << f << "\n" << lines(d);
  }
}

// Out and lse pass (the key's weight is ~1e-13), only the weights show key 16 read as 0: the last partial tile.
TEST(ModelReach, KeysNeverReadWhereOnlyWeightsFail) {
  const diagnose::Diagnosis d =
      mutant_on("partial-tile-dropped", "bf16_B2-Hq4-Hkv2-Lq13-Lk17-D16_causal-br-pad-softcap_logits_30_80.h5");
  EXPECT_EQ(d.top(), "skipped-keys") << lines(d);
}

// Lk below one tile: no key is read, every row follows the NaN policy, weights NaN included; the prediction's
// fully masked rows keep their policy weights (only poisoned rows' masked weights are taken as a kernel's 0).
// Lk 5 is one partial tile and one partial 128 x 128 block: the tile never read and the block mask's partial blocks
// never read predict the same outputs, so without probes the diagnosis says so instead of letting the tag order
// choose; neither is a NaN cause.
TEST(ModelReach, NoKeyReadUnderTheNanPolicy) {
  const diagnose::Diagnosis d =
      mutant_on("partial-tile-dropped", "fp32_B2-Hq4-Hkv2-Lq17-Lk5-D16_causal-br-fm-nan_normal.h5");
  EXPECT_EQ(d.top(), "undetermined") << lines(d);
  EXPECT_EQ(d.tied, (std::vector<std::string>{"skipped-keys", "block-mask-missing"})) << lines(d);
}

// RoPE faults of the power grid (its rope flavour: partial NeoX, positions past 64k) get their own tag from the
// outputs alone: the other pairing, the query at its row index or one position ahead, the partial rotation on
// the wrong half, fp16 angles. Judged at the base kernel's declared contract (rope=fp32-angles).
TEST(ModelReach, RopeFaultsGetTheirTags) {
  const std::pair<const char*, const char*> expect[] = {{"rope-interleave", "rope-interleave"},
                                                        {"rope-offset-ignored", "rope-offset"},
                                                        {"rope-off-by-one", "rope-offset"},
                                                        {"rope-partial-wrong-half", "rope-partial"},
                                                        {"rope-fp16-angles", "rope-precision"}};
  std::map<std::string, int> diagnosed;
  for (DType t : {DType::f32, DType::bf16})
    for (power::Logits lg : {power::Logits::normal, power::Logits::near_one_hot}) {
      const Problem p = power::grid_problem(1024, t, power::Flavour::rope, 8);
      const Inputs in = power::grid_inputs(p, lg, 20261123);
      const ExpectedAttention ref = expected_attention(p, in);
      diagnose::Options o;
      PrecisionContract c = default_contract(t);
      c.rope = RopeMath::fp32;
      o.tolerance.contract = c;
      for (const auto& [fault, tag] : expect)
        for (const power::Variant& v : power::fault_variants()) {
          if (v.name != fault) continue;
          const Outputs out = power::run_variant(v, p, in);
          if (judge(p, ref, out, o.tolerance).pass) continue;  // one position off in bf16 on normal logits passes
          ++diagnosed[fault];
          const diagnose::Diagnosis d = diagnose::diagnose({{}, p, in}, ref, out, o);
          EXPECT_EQ(d.top(), tag) << fault << " " << to_string(t) << " " << power::to_string(lg) << "\n" << lines(d);
        }
    }
  for (const auto& [fault, tag] : expect) EXPECT_GE(diagnosed[fault], 3) << fault << " failed too rarely to diagnose";
}

// QK-norm's eps faults of the power grid (its qk_norm flavour: QK-norm before partial NeoX RoPE, q and k near
// eps) get the tag qk-norm-eps from the outputs alone: eps dropped, eps outside the square root. Judged at the
// base kernel's declared contract (rope=fp32-angles).
TEST(ModelReach, QkNormPowerFaultsGetTheirTag) {
  std::map<std::string, int> diagnosed;
  for (DType t : {DType::f32, DType::bf16})
    for (power::Logits lg : {power::Logits::normal, power::Logits::near_one_hot}) {
      const Problem p = power::grid_problem(1024, t, power::Flavour::qk_norm, 8);
      const Inputs in = power::grid_inputs(p, lg, 20261128);
      const ExpectedAttention ref = expected_attention(p, in);
      diagnose::Options o;
      PrecisionContract c = default_contract(t);
      c.rope = RopeMath::fp32;
      o.tolerance.contract = c;
      for (const power::Variant& v : power::fault_variants()) {
        if (v.name != "qk-norm-eps-ignored" && v.name != "qk-norm-eps-outside") continue;
        const Outputs out = power::run_variant(v, p, in);
        ASSERT_FALSE(judge(p, ref, out, o.tolerance).pass)
            << v.name << " " << to_string(t) << " " << power::to_string(lg);
        ++diagnosed[v.name];
        const diagnose::Diagnosis d = diagnose::diagnose({{}, p, in}, ref, out, o);
        EXPECT_EQ(d.top(), "qk-norm-eps") << v.name << " " << to_string(t) << " " << power::to_string(lg) << "\n"
                                          << lines(d);
      }
    }
  EXPECT_EQ(diagnosed["qk-norm-eps-ignored"], 4);
  EXPECT_EQ(diagnosed["qk-norm-eps-outside"], 4);
}

// The absorbed-MLA faults of the power grid get their tags (the grid's mla flavour: V the first 32 of 64 columns).
TEST(ModelReach, MlaFaultsGetTheirTags) {
  const std::pair<const char*, const char*> expect[] = {
      {"mla-v-stride", "mla-v-stride"}, {"mla-v-columns", "mla-v-columns"}, {"mla-scale-dim", "mla-scale-dim"}};
  for (DType t : {DType::f32, DType::bf16})
    for (power::Logits lg : {power::Logits::normal, power::Logits::near_one_hot}) {
      const Problem p = power::grid_problem(1024, t, power::Flavour::mla, 8);
      const Inputs in = power::grid_inputs(p, lg, 20261128);
      const ExpectedAttention ref = expected_attention(p, in);
      for (const auto& [fault, tag] : expect)
        for (const power::Variant& v : power::fault_variants()) {
          if (v.name != fault) continue;
          const Outputs out = power::run_variant(v, p, in);
          ASSERT_FALSE(judge(p, ref, out).pass) << fault << " " << to_string(t) << " " << power::to_string(lg);
          const diagnose::Diagnosis d = diagnose::diagnose({{}, p, in}, ref, out, {});
          EXPECT_EQ(d.top(), tag) << fault << " " << to_string(t) << " " << power::to_string(lg) << "\n" << lines(d);
        }
    }
}

// The max-logit faults of the power grid (the row max before the softcap, of the unscaled dot products: out and
// lse right) get the tag max-logit-stage (the grid's max_logit flavour: causal, the logit stage at its first example).
TEST(ModelReach, MaxLogitStageFaultsGetTheirTag) {
  for (auto [t, lg] :
       {std::pair{DType::f32, power::Logits::large}, std::pair{DType::bf16, power::Logits::near_one_hot}}) {
    const Problem p = power::grid_problem(1024, t, power::Flavour::max_logit, 8);
    const Inputs in = power::grid_inputs(p, lg, 20261128);
    const ExpectedAttention ref = expected_attention(p, in);
    for (const power::Variant& v : power::fault_variants()) {
      if (v.name != "max-logit-stage" && v.name != "max-logit-unscaled") continue;
      const Outputs out = power::run_variant(v, p, in);
      const Verdict verdict = judge(p, ref, out);
      ASSERT_FALSE(verdict.pass) << v.name << " " << to_string(t) << " " << power::to_string(lg);
      EXPECT_EQ(verdict.worst().tensor, "max_logit") << v.name;
      const diagnose::Diagnosis d = diagnose::diagnose({{}, p, in}, ref, out, {});
      EXPECT_EQ(d.top(), "max-logit-stage") << v.name << " " << to_string(t) << " " << power::to_string(lg) << "\n"
                                            << lines(d);
    }
  }
}

TEST(ModelReach, QkNormEpsFaultsGetTheirTag) {
  // cpu on q and k normalised with eps dropped, or added outside the square root (fp64 here), judged against the
  // problem with QK-norm; vectors with mean(x^2) near eps (inputs times 2^-10, eps 1e-6), where eps matters.
  int diagnosed = 0;
  for (DType t : {DType::f32, DType::bf16})
    for (int64_t rotary : {0, 8})
      for (bool outside : {false, true}) {
        Problem p;
        p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 7, p.Lk = 19, p.Dqk = 16, p.Dv = 8, p.dtype = t, p.want_lse = true;
        p.rotary_dim = rotary, p.causal = true, p.alignment = Alignment::bottom_right;
        for (int64_t d = 0; d < p.Dqk; ++d)
          p.q_norm_weight.push_back(1.0 + 0.25 * double(d % 5)), p.k_norm_weight.push_back(2.0 - 0.125 * double(d % 7));
        Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 12);
        for (Tensor* x : {&in.q, &in.k})
          for (int64_t n = 0; n < x->numel(); ++n) x->set_offset(n, std::ldexp(x->get_offset(n), -10));
        Problem plain = p;
        plain.q_norm_weight.clear(), plain.k_norm_weight.clear();
        Inputs normed = in;
        for (bool query : {true, false}) {
          Tensor& x = query ? normed.q : normed.k;
          const std::vector<double>& w = query ? p.q_norm_weight : p.k_norm_weight;
          for (int64_t b = 0; b < p.B; ++b)
            for (int64_t h = 0; h < x.shape[1]; ++h)
              for (int64_t i = 0; i < x.shape[2]; ++i) {
                double ss = 0;
                for (int64_t d = 0; d < p.Dqk; ++d) ss += x.at(b, h, i, d) * x.at(b, h, i, d);
                const double r = outside ? 1.0 / (std::sqrt(ss / double(p.Dqk)) + p.qk_norm_eps)
                                         : 1.0 / std::sqrt(ss / double(p.Dqk));
                for (int64_t d = 0; d < p.Dqk; ++d) x.put(b, h, i, d, x.at(b, h, i, d) * r * w[size_t(d)]);
              }
        }
        Outputs out = make_outputs(plain);
        find_impl("cpu")->run(plain, normed, out);
        const ExpectedAttention ref = expected_attention(p, in);
        diagnose::Options o;
        ASSERT_FALSE(judge(p, ref, out, o.tolerance).pass)
            << to_string(t) << " rotary " << rotary << " outside " << outside;
        const diagnose::Diagnosis d = diagnose::diagnose({{}, p, in}, ref, out, o);
        EXPECT_EQ(d.top(), "qk-norm-eps") << to_string(t) << " rotary " << rotary << " outside " << outside << "\n"
                                          << lines(d);
        ++diagnosed;
      }
  EXPECT_EQ(diagnosed, 8);
}

// The modification and serving-cache faults of the power grid (ALiBi sign and head, ALiBi ignored, a document or
// chunk boundary one token off, a partial block of the block mask treated as full, a quantized cache's scales
// dropped or read from block 0, a paged cache's page index wrapped, top-k padding read as key 0) get their own tags,
// from the outputs alone.
TEST(ModelReach, ModificationAndCacheFaultsGetTheirTags) {
  const std::pair<const char*, const char*> expect[] = {
      {"alibi-sign", "alibi-sign"},           {"alibi-slope-head", "alibi-slope-head"},
      {"alibi-ignored", "parameter-ignored"}, {"document-off-by-one", "document-boundary"},
      {"chunk-off-by-one", "chunk-boundary"}, {"block-partial-as-full", "block-mask-partial-as-full"},
      {"descale-ignored", "descale-ignored"}, {"descale-wrong-group", "descale-wrong-group"},
      {"index-overflow", "index-overflow"},   {"topk-padding", "topk-padding"}};
  for (const auto& [fault, tag] : expect)
    for (auto [t, lg] : {std::pair{DType::f32, power::Logits::normal}}) {  // diagnose.mutants: every dtype and shape
      power::Fault f{};
      for (const power::Variant& v : power::fault_variants())
        if (v.name == fault) f = v.fault;
      const diagnose::Diagnosis d = fault_on(fault, t, power::flavour_of(f), lg);
      EXPECT_EQ(d.top(), tag) << fault << " " << to_string(t) << " " << power::to_string(lg) << "\n" << lines(d);
    }
}

// A block-sparse kernel handed a block mask that leaves one non-empty block out skips that block's keys for that
// query block only: cpu-flash (tiles 96 x 128 at head dim 80) without (query block 0, key block 1). Documents
// 0..95 and 128..191 are one document, so rows 96..127 see nothing in key block 1 and the dropped tile is also the
// 128 x 128 block (0, 1); rows 128..191 still read key block 1, so no key tile is skipped in every row. Small enough
// (B Hq Lq Lk Dv <= 2^22) for the diagnoser to try single blocks.
TEST(ModelReach, ABlockLeftOutOfTheBlockMaskIsBlockMaskMissing) {
  Problem p;
  p.B = p.Hq = p.Hkv = 1, p.Lq = p.Lk = 200, p.Dqk = p.Dv = 80, p.dtype = DType::f32, p.want_lse = true;
  for (int64_t j = 0; j < p.Lk; ++j) p.doc_ids.push_back(j < 96 || (j >= 128 && j < 192) ? 0 : j < 128 ? 1 : 2);
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 7);
  BlockMask m = derive_block_mask(p, in, 96, 128);
  ASSERT_EQ(m.kv_num_blocks[0], 2);  // query block 0 (rows 0..95): key blocks 0 and 1, both partial
  ASSERT_EQ(m.kv_indices[1], 1);
  m.kv_num_blocks[0] = 1;  // key block 1 left out of query block 0
  Outputs out = make_outputs(p);
  {
    const BlockMaskScope handed(&m);
    ASSERT_TRUE(run_impl(*find_impl("cpu-flash"), p, in, out).ok);
  }
  const ExpectedAttention ref = expected_attention(p, in);
  ASSERT_FALSE(judge(p, ref, out).pass);
  const diagnose::Diagnosis d = diagnose::diagnose({{}, p, in}, ref, out, {});
  EXPECT_EQ(d.top(), "block-mask-missing") << lines(d);
}

// The diagnoser sees each score as the reference computes it, score modifications included, and each key as the
// reference's composed mask shows it, mask modifications included: a correct output explains nothing.
TEST(ModelReach, SubjectScoresAndMasksFollowTheModifications) {
  Problem p;
  p.B = 1, p.Hq = 2, p.Hkv = 1, p.Lq = 12, p.Lk = 12, p.Dqk = 8, p.Dv = 4, p.dtype = DType::f32, p.want_lse = true;
  p.causal = true, p.scores_out = ScoresOut::masked;
  p.alibi_slopes = {0.5, 0.125};
  p.doc_ids = {0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2};
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
  const ExpectedAttention ref = expected_attention(p, in);
  Outputs out;
  out.out = Tensor(DType::f32, {p.B, p.Hq, p.Lq, p.Dv});
  for (int64_t n = 0; n < out.out.numel(); ++n) out.out.set_offset(n, ref.out[static_cast<size_t>(n)]);
  const prop::Case c{{}, p, in};
  const diagnose::Subject s(c, ref, out, {});
  int64_t visible = 0;
  for (int64_t r = 0; r < s.rows(); ++r)
    for (int64_t j = 0; j < p.Lk; ++j) {
      const size_t n = static_cast<size_t>(r * p.Lk + j);
      const int64_t i = r % p.Lq;
      EXPECT_EQ(s.vis[n] != 0, j <= i && p.doc_ids[size_t(i)] == p.doc_ids[size_t(j)]) << "row " << r << " key " << j;
      if (!s.vis[n]) continue;
      ++visible;
      EXPECT_NEAR(s.score[n], ref.scores[n], 1e-12) << "row " << r << " key " << j;
      EXPECT_NEAR(s.unmasked_score(r, j), ref.scores[n], 1e-12) << "row " << r << " key " << j;
    }
  EXPECT_EQ(visible, 2 * (15 + 10 + 6));  // per head: documents of 5, 4 and 3 tokens, causal inside each
  EXPECT_EQ(s.n_bad_out, 0);
}

}  // namespace
}  // namespace attncheck
