// The checked-in merge fixtures (golden/states, from golden/suite-states.json): they read back, cover every hostile
// case the model names, and each injected merge mistake is caught and diagnosed on them (the fp32 variants of
// harness/power/merge_power.cpp, written apart from the diagnosis models).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "attncheck/fixture.hpp"
#include "attncheck/state_fixture.hpp"
#include "merge_diagnosis.hpp"
#include "merge_power.hpp"

namespace attncheck {
namespace {

std::vector<MergeFixture> fixtures() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(std::string(GOLDEN_DIR) + "/states"))
    if (e.path().extension() == ".h5") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<MergeFixture> out;
  for (const auto& f : files) {
    EXPECT_TRUE(is_merge_fixture(f)) << f;
    out.push_back(read_merge_fixture(f));
  }
  return out;
}

bool any_nan(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isnan(t.get_offset(i))) return true;
  return false;
}

TEST(StateFixtures, CoverEveryHostileCase) {
  const std::vector<MergeFixture> fx = fixtures();
  ASSERT_GE(fx.size(), 30u);
  std::set<std::string> sources, dtypes, sentinels, layouts, forms, o_layouts, fp8_outputs;
  int64_t max_n = 0, all_empty_rows = 0, one_empty_rows = 0, nan_o = 0, gap_1e4 = 0;
  uint64_t bytes = 0;
  for (const MergeFixture& f : fx) {
    const MergeProblem& p = f.problem;
    sources.insert(f.source), dtypes.insert(to_string(p.dtype)),
        forms.insert(p.conv.form == StateForm::normalised ? "n" : "u");
    sentinels.insert(std::to_string(int(p.conv.empty_lse))), layouts.insert(std::to_string(int(p.conv.layout)));
    o_layouts.insert(std::to_string(int(p.conv.o_layout)));
    if (p.conv.out_dtype) fp8_outputs.insert(to_string(*p.conv.out_dtype));
    if (f.source == "varlen") {
      EXPECT_EQ(p.B, 1) << p.name;  // packed: the rows are the total tokens
    }
    max_n = std::max(max_n, p.N);
    nan_o += any_nan(f.inputs.o);
    std::vector<State> st;
    for (int64_t n = 0; n < p.N; ++n) st.push_back(decode_state(p, f.inputs, n));
    for (int64_t r = 0; r < st[0].rows(); ++r) {
      int64_t empties = 0;
      double lo = INFINITY, hi = -INFINITY;
      for (const State& s : st) {
        empties += s.empty(r);
        if (!s.empty(r)) lo = std::min(lo, s.lse(r)), hi = std::max(hi, s.lse(r));
      }
      all_empty_rows += empties == p.N, one_empty_rows += empties > 0 && empties < p.N;
      gap_1e4 += hi - lo >= 9000;
    }
    bytes += std::filesystem::file_size(std::string(GOLDEN_DIR) + "/states/" + fixture_file_name(p.name));
  }
  EXPECT_EQ(sources, (std::set<std::string>{"split", "cascade", "chunked", "varlen", "states"}));
  EXPECT_EQ(dtypes, (std::set<std::string>{"fp32", "fp16", "bf16"}));
  EXPECT_EQ(forms.size(), 2u);
  EXPECT_EQ(sentinels.size(), 3u);  // -inf, +inf, finite
  EXPECT_EQ(layouts.size(), 2u);
  EXPECT_EQ(o_layouts.size(), 2u);                                          // O [B,H,L,D] and token-major [B,L,H,D]
  EXPECT_EQ(fp8_outputs, (std::set<std::string>{"fp8_e4m3", "fp8_e5m2"}));  // merged O stored as fp8 with a scale
  EXPECT_EQ(max_n, 16);
  EXPECT_GT(all_empty_rows, 0);
  EXPECT_GT(one_empty_rows, 0);
  EXPECT_GT(nan_o, 0);
  EXPECT_GT(gap_1e4, 0);
  EXPECT_LE(bytes, 1u << 20) << "golden/states must stay under 1 MB";
}

// A correct fp32 merge passes every fixture; each mistake fails at least one, with its own tag wherever it fails
// (taking a -inf sentinel as an lse is the empty-state NaN itself).
TEST(StateFixtures, EveryMergeMistakeIsCaughtWithItsTag) {
  const std::vector<MergeFixture> fx = fixtures();
  for (const power::MergeVariant& v : power::merge_variants()) {
    int failed = 0;
    for (const MergeFixture& f : fx) {
      StoredStates out = make_merge_outputs(f.problem);
      out.o.fill(NAN);
      for (std::optional<Tensor>* t : {&out.lse, &out.max, &out.sum})
        if (*t) (*t)->fill(NAN);
      power::run_merge_variant(v, f.problem, f.inputs, out);
      const MergeVerdict verdict = judge_merge(f.problem, f.inputs, out);
      if (verdict.pass) continue;
      ++failed;
      EXPECT_FALSE(v.expect.empty()) << v.name << " fails " << f.problem.name << ": " << verdict.worst;
      if (v.expect.empty()) continue;
      const bool same = v.expect == "lse-sentinel" && f.problem.conv.empty_lse == EmptyLse::neg_inf;
      EXPECT_EQ(diagnose_merge(f.problem, f.inputs, out).tag, same ? "empty-state-nan" : v.expect)
          << v.name << " on " << f.problem.name;
    }
    if (!v.expect.empty()) {
      EXPECT_GT(failed, 0) << v.name << " is never caught";
    }
  }
}

}  // namespace
}  // namespace attncheck
