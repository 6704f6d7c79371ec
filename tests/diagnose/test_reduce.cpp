// The smallest-repro reducer: a cut keeps exactly what each kept query row sees (the reference on the cut equals the
// original's rows), and every selftest mutant's golden failure reduces to a small case with the same diagnosis.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "attncheck/fixture.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/rope.hpp"
#include "mutants.hpp"
#include "reduce.hpp"
#include "validate.hpp"

namespace attncheck {
namespace {

std::vector<Fixture> golden() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(ATTNCHECK_GOLDEN_DIR))
    if (e.path().extension() == ".h5") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<Fixture> out;
  for (const auto& f : files) out.push_back(read_fixture(f));
  return out;
}

bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Rows of the cut whose original row sees only keys in [k0, k0+nk) must come out bitwise as before.
int64_t expect_rows_kept(const prop::Case& c, const diagnose::Cut& k, const std::string& name) {
  const prop::Case d = diagnose::cut(c, k);
  const ExpectedAttention a = expected_attention(c.p, c.in), r = expected_attention(d.p, d.in);
  int64_t compared = 0;
  for (int64_t b = 0; b < k.nb; ++b)
    for (int64_t h = 0; h < k.nh; ++h)
      for (int64_t i = 0; i < k.nq; ++i) {
        const int64_t ob = k.b0 + b, oh = k.h0 + h, oi = k.i0 + i;
        bool inside = true;
        for (int64_t j = 0; j < c.p.Lk && inside; ++j)
          inside = (j >= k.k0 && j < k.k0 + k.nk) || !prop::visible(c.p, c.in, ob, oh, oi, j);
        // A fully masked row under the uniform policy averages every value, seen or not, and under a finite fill its
        // lse is fill + log(keys): only a cut that keeps all keys keeps it (the first golden files with such rows in
        // their last batch: fp8_*pad-mask-softcap-finite, uniform; fp16_*pad-bias-finite-maxlogit-heads, zero).
        if ((c.p.fully_masked == FullyMasked::uniform || c.p.fill == MaskFill::finite) &&
            prop::row_fully_masked(c.p, c.in, ob, oh, oi))
          inside = k.k0 == 0 && k.nk == c.p.Lk;
        if (!inside) continue;
        ++compared;
        const int64_t row = (b * k.nh + h) * k.nq + i, orow = (ob * c.p.Hq + oh) * c.p.Lq + oi;
        bool equal = same(r.lse[static_cast<size_t>(row)], a.lse[static_cast<size_t>(orow)]);
        for (int64_t e = 0; e < c.p.Dv; ++e)
          equal = equal &&
                  same(r.out[static_cast<size_t>(row * c.p.Dv + e)], a.out[static_cast<size_t>(orow * c.p.Dv + e)]);
        if (!equal) {
          ADD_FAILURE() << name << ": row " << orow << " differs in the cut " << d.p.name();
          return compared;
        }
      }
  if (k.nk == c.p.Lk) {
    EXPECT_EQ(compared, k.nb * k.nh * k.nq) << name;
  }
  return compared;
}

TEST(Reduce, ACutKeepsWhatEveryKeptRowSees) {
  int cuts = 0;
  int64_t rows = 0;
  for (const Fixture& f : golden()) {
    const Problem& p = f.problem;
    if (p.sequences() > 0) continue;  // varlen: reduce() takes one sequence (sequence_problem), cut() refuses
    if (p.kv_quantized()) {           // cut() refuses (the scales are not sliced): the case stays whole
      EXPECT_THROW(diagnose::cut(prop::Case{{}, p, f.inputs}, diagnose::whole(p)), std::invalid_argument) << f.name;
      continue;
    }
    if (p.rotary_dim > 0 && !p.rope_mrope_section.empty()) {  // mRoPE: cut() keeps the tokens (the ids are not cut)
      diagnose::Cut k = diagnose::whole(p);
      k.i0 = p.Lq / 3, k.nq = 1;
      EXPECT_THROW(diagnose::cut(prop::Case{{}, p, f.inputs}, k), std::invalid_argument) << f.name;
      continue;
    }
    const prop::Case c{{}, p, f.inputs};
    diagnose::Cut k = diagnose::whole(p);
    k.b0 = p.B - 1, k.nb = 1;
    if (p.Hkv > 1) k.g0 = p.Hkv - 1, k.ng = 1, k.h0 = k.g0 * p.group_size(), k.nh = p.group_size();
    k.i0 = p.Lq / 3, k.nq = std::max<int64_t>(1, p.Lq / 2);  // rows in the middle: the alignment must move
    rows += expect_rows_kept(c, k, f.name), ++cuts;
    k.nk = p.Lk - p.Lk / 3;
    if (k.nk > p.past_len) rows += expect_rows_kept(c, k, f.name + " (key prefix)"), ++cuts;
    k.k0 = p.Lk / 4, k.nk = p.Lk - p.Lk / 4;
    if (p.page_size > 0) k.k0 -= k.k0 % p.page_size, k.nk = p.Lk - k.k0;    // a paged cut starts at a page
    if (p.chunk_size > 0) k.k0 -= k.k0 % p.chunk_size, k.nk = p.Lk - k.k0;  // and a chunked one at a chunk
    if (p.past_len == 0) rows += expect_rows_kept(c, k, f.name + " (key suffix)"), ++cuts;
  }
  EXPECT_GT(cuts, 400);
  EXPECT_GT(rows, 3000);  // rows compared bitwise (4019 when written)
}

// Two sequences of 17 keys in pages of 5: batch 1 starts on batch 0's first page (shared), pages 2, 4, 6 are unused.
prop::Case paged_case() {
  Problem p;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 3, p.Lk = 17, p.Dqk = 16, p.Dv = 8, p.want_lse = true;
  p.page_size = 5, p.num_pages = 10, p.block_table = {3, 7, 0, 9, 3, 1, 8, 5};
  p.key_lengths = {17, 12}, p.causal = true, p.alignment = Alignment::bottom_right;
  return {{}, p, gen::generate_inputs(p, gen::Distribution::normal, 3)};
}

// The per-key bias [b?, h, j] is cut to the kept batches, heads and keys: the kept rows come out bitwise as before.
TEST(Reduce, ACutKeepsTheKeyBiasOfTheKeptBatchesHeadsAndKeys) {
  for (bool per_batch : {false, true}) {
    Problem p;
    p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 6, p.Lk = 9, p.Dqk = p.Dv = 4, p.want_lse = true;
    for (int64_t n = 0; n < (per_batch ? p.B : 1) * p.Hq * p.Lk; ++n) p.key_bias.push_back(double(n) / 8);
    const prop::Case c{{}, p, gen::generate_inputs(p, gen::Distribution::normal, 11)};
    diagnose::Cut k = diagnose::whole(p);
    k.b0 = 1, k.nb = 1, k.h0 = 2, k.nh = 2, k.g0 = 1, k.ng = 1, k.k0 = 3, k.nk = 5;
    std::vector<double> want;
    for (int64_t h = 2; h < 4; ++h)
      for (int64_t j = 3; j < 8; ++j) want.push_back(p.key_bias[size_t(((per_batch ? p.Hq : 0) + h) * p.Lk + j)]);
    EXPECT_EQ(diagnose::cut(c, k).p.key_bias, want) << "per batch " << per_batch;
    k.k0 = 0, k.nk = p.Lk;  // every key: every kept row compares
    EXPECT_EQ(expect_rows_kept(c, k, "key_bias"), k.nb * k.nh * k.nq);
  }
}

TEST(Reduce, APagedCutReadsTheKeptBatchesThroughTheirBlockTableRows) {
  const prop::Case c = paged_case();
  diagnose::Cut k = diagnose::whole(c.p);
  k.b0 = 1, k.nb = 1, k.g0 = 1, k.ng = 1, k.h0 = 2, k.nh = 2;
  EXPECT_EQ(expect_rows_kept(c, k, "batch 1"), 2 * 3);
  EXPECT_EQ(diagnose::cut(c, k).p.block_table, (std::vector<int64_t>{3, 1, 8, 5}));
  k.k0 = 5, k.nk = 12;  // keys from the second page on: batch 1 reads pages 1, 8, 5
  EXPECT_EQ(diagnose::cut(c, k).p.block_table, (std::vector<int64_t>{1, 8, 5}));
  expect_rows_kept(c, k, "batch 1 from key 5");
  k.b0 = 0, k.k0 = 0, k.nk = 6;  // a key prefix: batch 0's first two pages
  EXPECT_EQ(diagnose::cut(c, k).p.block_table, (std::vector<int64_t>{3, 7}));
  expect_rows_kept(c, k, "batch 0, 6 keys");
  k.k0 = 3, k.nk = 14;  // not at a page boundary: refused, naming page_size
  try {
    diagnose::cut(c, k);
    ADD_FAILURE() << "a cut from key 3 of pages of 5 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("page_size=5"), std::string::npos) << e.what();
  }
}

// A kernel that reads the pages as if the block table were the identity: its failure needs the pages, so the
// reduction keeps them, and still cuts the batch down through the block table.
class PagesInOrder final : public Impl {
 public:
  std::string name() const override { return "pages-in-order"; }
  std::string description() const override { return "test mutant of cpu: ignores the block table"; }
  Capabilities capabilities() const override { return find_impl("cpu")->capabilities(); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    Problem q = p;
    for (size_t e = 0; e < q.block_table.size(); ++e) q.block_table[e] = static_cast<int64_t>(e);
    find_impl("cpu")->run(q, in, out);
  }
};

TEST(Reduce, APagedFailureReducesToOneBatchAndKeepsItsPages) {
  const prop::Case c = paged_case();
  const PagesInOrder bad;
  Outputs out;
  ASSERT_TRUE(run_impl(bad, c.p, c.in, out).ok);
  const ExpectedAttention ref = expected_attention(c.p, c.in);
  ASSERT_FALSE(judge(c.p, ref, out).pass);
  diagnose::Options o;
  o.rerun = &bad;
  const std::string top = diagnose::diagnose(c, ref, out, o).top();
  const diagnose::Reduction r = diagnose::reduce(c, bad, top, o);
  const Problem& q = r.reduced.p;
  EXPECT_EQ(q.B, 1) << q.name();
  EXPECT_GT(q.page_size, 0) << "the contiguous problem does not fail: " << q.name();
  Outputs again;
  ASSERT_TRUE(run_impl(bad, q, r.reduced.in, again).ok);
  EXPECT_FALSE(judge(q, expected_attention(q, r.reduced.in), again).pass) << q.name();
  EXPECT_EQ(r.diagnosis.top(), top) << q.name();
}

TEST(Reduce, EveryMutantsFailureReducesToASmallCaseWithTheSameDiagnosis) {
  const std::vector<Fixture> fixtures = golden();
  for (const mutants::Entry& m : mutants::catalogue()) {
    // The modification mutants have no single cause tag (harness/diagnose/validate.cpp).
    if (m.correct || !diagnose::injected_tags().count(m.impl->name())) continue;
    const std::string tag = diagnose::injected_tags().at(m.impl->name());
    bool done = false;
    for (const Fixture& f : fixtures) {
      Outputs out;
      if (done || !run_impl(*m.impl, f.problem, f.inputs, out).ok ||
          judge(f.problem, f.expected, out, f.tolerance).pass)
        continue;
      diagnose::Options o;
      o.rerun = m.impl.get(), o.tolerance = f.tolerance;
      const prop::Case c{{}, f.problem, f.inputs};
      if (diagnose::diagnose(c, f.expected, out, o).top() != tag) continue;  // misses are diagnose_validate's business
      done = true;
      const diagnose::Reduction r = diagnose::reduce(c, *m.impl, tag, o);
      const Problem& q = r.reduced.p;
      EXPECT_EQ(r.diagnosis.top(), tag) << m.impl->name() << " on " << f.name << " -> " << q.name();
      Outputs again;
      ASSERT_TRUE(run_impl(*m.impl, q, r.reduced.in, again).ok);
      EXPECT_FALSE(judge(q, expected_attention(q, r.reduced.in), again, f.tolerance).pass) << q.name();
      EXPECT_EQ(q.B, 1) << m.impl->name() << ": " << q.name();
      EXPECT_LT(q.B * q.Hq * q.Lq * q.Lk * (q.Dqk + q.Dv) * 4,
                f.problem.B * f.problem.Hq * f.problem.Lq * f.problem.Lk * (f.problem.Dqk + f.problem.Dv))
          << m.impl->name() << ": " << f.problem.name() << " -> " << q.name();
      EXPECT_LE(r.reruns, 200 + o.max_reruns + 1);
      std::printf("[reduce] %-22s %s -> %s (%d re-runs)\n", m.impl->name().c_str(), f.problem.short_name().c_str(),
                  q.short_name().c_str(), r.reruns);
    }
    EXPECT_TRUE(done) << m.impl->name() << ": no golden failure diagnosed " << tag;
  }
}

// Varlen (packed sequences, cu_seqlens): the mutants do not run packed problems, so the bugs are planted in the
// built-in cpu implementation by running it on a derived problem (a default scale of 1/d, a causal diagonal one key
// to the right). A failure on a packed golden fixture reduces to one sequence as an ordinary (non-varlen) case that
// still fails with the same diagnosis.
class Planted final : public Impl {
 public:
  Planted(std::string name, std::function<void(Problem&)> bug) : name_(std::move(name)), bug_(std::move(bug)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "cpu with a planted bug"; }
  Capabilities capabilities() const override { return base()->capabilities(); }
  Support supports(const Problem& p) const override { return base()->supports(p); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    Problem q = p;
    bug_(q);
    base()->run(q, in, out);
  }

 private:
  static ImplPtr base() {
    static const ImplPtr b = find_impl("cpu");
    return b;
  }
  std::string name_;
  std::function<void(Problem&)> bug_;
};

TEST(Reduce, VarlenFailuresReduceToOneSequenceWithTheSameDiagnosis) {
  std::vector<Fixture> packed;
  for (Fixture& f : golden())
    if (f.problem.sequences() > 0) packed.push_back(std::move(f));
  ASSERT_FALSE(packed.empty()) << "no varlen golden fixture";
  ASSERT_TRUE(find_impl("cpu"));
  const std::vector<std::pair<Planted, std::string>> bugs = {
      {Planted("scale-1/d",
               [](Problem& q) {
                 if (!q.scale) q.scale = 1.0 / static_cast<double>(q.Dqk);
               }),
       "scale"},
      // With RoPE the moved diagonal also moves the query positions (both sit on it): two bugs, not this one.
      {Planted("diagonal+1",
               [](Problem& q) {
                 if (!q.causal || uses_rope(q)) return;
                 std::vector<int64_t> off;
                 for (int64_t b = 0; b < q.B; ++b) off.push_back(q.diagonal_offset(b) + 1);
                 q.alignment = Alignment::explicit_, q.causal_offsets = off;
               }),
       "causal-diagonal"}};
  for (const auto& [bug, tag] : bugs) {
    int reduced = 0;
    for (const Fixture& f : packed) {
      Outputs out;
      if (!run_impl(bug, f.problem, f.inputs, out).ok || judge(f.problem, f.expected, out, f.tolerance).pass) continue;
      diagnose::Options o;
      o.rerun = &bug, o.tolerance = f.tolerance;
      const prop::Case c{{}, f.problem, f.inputs};
      if (diagnose::diagnose(c, f.expected, out, o).top() != tag) continue;
      const diagnose::Reduction r = diagnose::reduce(c, bug, tag, o);
      const Problem& q = r.reduced.p;
      EXPECT_EQ(q.sequences(), 0) << bug.name() << " on " << f.name << " -> " << q.name();
      EXPECT_EQ(r.diagnosis.top(), tag) << bug.name() << " on " << f.name << " -> " << q.name();
      Outputs again;
      ASSERT_TRUE(run_impl(bug, q, r.reduced.in, again).ok);
      EXPECT_FALSE(judge(q, expected_attention(q, r.reduced.in), again, f.tolerance).pass) << q.name();
      EXPECT_LT(q.Lq * q.Hq, f.problem.Lq * f.problem.Hq)
          << bug.name() << ": " << f.problem.name() << " -> " << q.name();
      std::printf("[reduce varlen] %-12s %s -> %s (%d re-runs)\n", bug.name().c_str(), f.problem.short_name().c_str(),
                  q.short_name().c_str(), r.reruns);
      ++reduced;
    }
    EXPECT_GE(reduced, 2) << bug.name() << ": too few varlen golden failures diagnosed " << tag;
  }
}

}  // namespace
}  // namespace attncheck
