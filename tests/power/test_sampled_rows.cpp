// Long context in minutes: the reference on sampled query rows is the full reference on those rows,
// the rows include where kernels go wrong, and the judge checks the sampled rows against it and every row without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {
namespace {

Problem long_causal() {
  Problem p;
  p.B = 1, p.Hq = 2, p.Hkv = 1, p.Lq = 600, p.Lk = 700, p.Dqk = 16, p.Dv = 8, p.dtype = DType::f32;
  p.causal = true, p.alignment = Alignment::top_left, p.want_lse = true, p.want_weights = true;
  return p;
}

bool has(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(SampledRows, IncludeTheEdgesAndTheLargestQueries) {
  const Problem p = long_causal();
  Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 3);
  for (int64_t d = 0; d < p.Dqk; ++d) in.q.put(0, 1, 333, d, 10.0);  // the row with the largest |q|
  const std::vector<int64_t> r = sample_rows(p, in, 40);
  EXPECT_TRUE(std::is_sorted(r.begin(), r.end()));
  EXPECT_LE(r.size(), 44u);
  for (int64_t i : {0, 599, 63, 64, 65, 127, 128, 129, 333}) EXPECT_TRUE(has(r, i)) << i;
  EXPECT_EQ(sample_rows(p, in, 0).size(), 600u);
}

TEST(SampledRows, SampledReferenceIsTheFullReferenceOnThoseRowsAndTheJudgeUsesOnlyThem) {
  const Problem p = long_causal();
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 4);
  const std::vector<int64_t> rows = sample_rows(p, in, 24);
  const ExpectedAttention full = expected_attention(p, in), part = expected_attention_rows(p, in, rows);
  for (int64_t h = 0; h < p.Hq; ++h)
    for (int64_t i : rows) {
      EXPECT_EQ(part.lse[static_cast<size_t>(h * p.Lq + i)], full.lse[static_cast<size_t>(h * p.Lq + i)]);
      for (int64_t d = 0; d < p.Dv; ++d) {
        const size_t n = static_cast<size_t>((h * p.Lq + i) * p.Dv + d);
        EXPECT_EQ(part.out[n], full.out[n]);
        EXPECT_EQ(part.out_abs[n], full.out_abs[n]);
      }
    }
  Outputs o;
  ASSERT_TRUE(run_impl(*find_impl("cpu-flash"), p, in, o).ok);
  Verdict v = judge(p, part, o);
  EXPECT_TRUE(v.pass) << v.worst().describe();
  EXPECT_EQ(v.tensors.front().n, static_cast<int64_t>(rows.size()) * p.Hq * p.Dv);  // out: the sampled rows only

  Outputs bad = o;  // a sampled row off by 1%: the reference comparison fails
  bad.out.put(0, 1, rows[3], 2, 1.01 * bad.out.at(0, 1, rows[3], 2) + 1e-3);
  EXPECT_FALSE(judge(p, part, bad).pass);

  int64_t unsampled = 1;
  while (has(rows, unsampled)) ++unsampled;
  bad = o;  // NaN in a row the reference did not compute: the reference-free checks fail
  bad.out.put(0, 0, unsampled, 0, NAN);
  v = judge(p, part, bad);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.worst().tensor, "all_rows");
  bad = o;  // weights of an unsampled row that do not sum to 1
  bad.weights->put(0, 0, unsampled, 0, bad.weights->at(0, 0, unsampled, 0) + 0.01);
  EXPECT_FALSE(judge(p, part, bad).pass);
}

}  // namespace
}  // namespace attncheck
