// The smallest-repro reducer: a cut keeps exactly what each kept query row sees (the reference on the cut equals the
// original's rows), and every selftest mutant's golden failure reduces to a small case with the same diagnosis.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "attncheck/fixture.hpp"
#include "attncheck/reference.hpp"
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
  const ReferenceResult a = reference_attention(c.p, c.in), r = reference_attention(d.p, d.in);
  int64_t compared = 0;
  for (int64_t b = 0; b < k.nb; ++b)
    for (int64_t h = 0; h < k.nh; ++h)
      for (int64_t i = 0; i < k.nq; ++i) {
        const int64_t ob = k.b0 + b, oh = k.h0 + h, oi = k.i0 + i;
        bool inside = true;
        for (int64_t j = 0; j < c.p.Lk && inside; ++j)
          inside = (j >= k.k0 && j < k.k0 + k.nk) || !prop::visible(c.p, c.in, ob, oh, oi, j);
        if (!inside) continue;
        ++compared;
        const int64_t row = (b * k.nh + h) * k.nq + i, orow = (ob * c.p.Hq + oh) * c.p.Lq + oi;
        bool equal = same(r.lse[static_cast<size_t>(row)], a.lse[static_cast<size_t>(orow)]);
        for (int64_t e = 0; e < c.p.Dv; ++e)
          equal = equal && same(r.out[static_cast<size_t>(row * c.p.Dv + e)], a.out[static_cast<size_t>(orow * c.p.Dv + e)]);
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
    const prop::Case c{{}, p, f.inputs};
    diagnose::Cut k = diagnose::whole(p);
    k.b0 = p.B - 1, k.nb = 1;
    if (p.Hkv > 1) k.g0 = p.Hkv - 1, k.ng = 1, k.h0 = k.g0 * p.group_size(), k.nh = p.group_size();
    k.i0 = p.Lq / 3, k.nq = std::max<int64_t>(1, p.Lq / 2);  // rows in the middle: the alignment must move
    rows += expect_rows_kept(c, k, f.name), ++cuts;
    k.nk = p.Lk - p.Lk / 3;
    if (k.nk > p.past_len) rows += expect_rows_kept(c, k, f.name + " (key prefix)"), ++cuts;
    k.k0 = p.Lk / 4, k.nk = p.Lk - p.Lk / 4;
    if (p.past_len == 0) rows += expect_rows_kept(c, k, f.name + " (key suffix)"), ++cuts;
  }
  EXPECT_GT(cuts, 400);
  EXPECT_GT(rows, 3000);  // rows compared bitwise (4019 when written)
}

TEST(Reduce, EveryMutantsFailureReducesToASmallCaseWithTheSameDiagnosis) {
  const std::vector<Fixture> fixtures = golden();
  for (const mutants::Entry& m : mutants::catalogue()) {
    if (m.correct) continue;
    const std::string tag = diagnose::injected_tags().at(m.impl->name());
    bool done = false;
    for (const Fixture& f : fixtures) {
      Outputs out;
      if (done || !run_impl(*m.impl, f.problem, f.inputs, out).ok || judge(f.problem, f.expected, out, f.tolerance).pass)
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
      EXPECT_FALSE(judge(q, reference_attention(q, r.reduced.in), again, f.tolerance).pass) << q.name();
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

}  // namespace
}  // namespace attncheck
