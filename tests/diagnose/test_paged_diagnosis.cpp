// Paged KV caches in the diagnosis: a failure on a paged case is diagnosed like the same failure on its contiguous
// twin (the models read K and V through the block table), and a kernel that ignores the block table (reads the
// pool's pages in order) is diagnosed `block-table`, from its outputs alone and with probes.
#include <gtest/gtest.h>

#include "attncheck/fixture.hpp"
#include "attncheck/reference.hpp"
#include "diagnosis.hpp"
#include "mutants.hpp"

namespace attncheck {
namespace {

const char* const kPaged[] = {"fp32_B2-Hq4-Hkv2-Lq1-Lk17-D16_causal-br-pad-paged5_normal_decode-shared.h5",
                              "fp32_B2-Hq4-Hkv2-Lq4-Lk17-D16_bshd-causal-br-pad-paged4_poison_masked.h5",
                              "bf16_B2-Hq4-Hkv2-Lq4-Lk17-D16_bshd-causal-br-pad-paged4_poison_masked.h5",
                              "fp32_B2-Hq4-Hkv1-Lq5-Lk17-D16_bias-drop-scores-masked-paged32_normal.h5"};

Fixture paged_fixture(const char* name) { return read_fixture(std::string(ATTNCHECK_GOLDEN_DIR) + "/" + name); }

std::string lines(const diagnose::Diagnosis& d) {
  std::string s;
  for (const std::string& l : d.text()) s += l + "\n";
  return s;
}

// The planted bug: cpu run with the block table replaced by the pool's pages in order (batch b's page k = b*n + k).
class IgnoresBlockTable final : public Impl {
 public:
  std::string name() const override { return "ignores-block-table"; }
  std::string description() const override { return "reads a paged KV cache's pages contiguously"; }
  Capabilities capabilities() const override { return cpu_->capabilities(); }
  Support supports(const Problem& p) const override { return cpu_->supports(p); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    Problem q = p;
    for (size_t e = 0; e < q.block_table.size(); ++e) q.block_table[e] = static_cast<int64_t>(e);
    cpu_->run(q, in, out);
  }

 private:
  ImplPtr cpu_ = find_impl("cpu");
};

TEST(PagedDiagnosis, IgnoredBlockTableIsDiagnosedWithAndWithoutProbes) {
  const IgnoresBlockTable bug;
  for (const char* name : kPaged) {
    const Fixture f = paged_fixture(name);
    Outputs out;
    ASSERT_TRUE(run_impl(bug, f.problem, f.inputs, out).ok) << name;
    ASSERT_FALSE(judge(f.problem, f.expected, out, f.tolerance).pass) << name;
    diagnose::Options o;
    o.tolerance = f.tolerance;
    const diagnose::Diagnosis alone = diagnose::diagnose({{}, f.problem, f.inputs}, f.expected, out, o);
    EXPECT_EQ(alone.top(), "block-table") << name << "\n" << lines(alone);
    o.rerun = &bug;
    const diagnose::Diagnosis probed = diagnose::diagnose({{}, f.problem, f.inputs}, f.expected, out, o);
    EXPECT_EQ(probed.top(), "block-table") << name << "\n" << lines(probed);
    EXPECT_NE(lines(probed).find("probe paged K/V gathered into contiguous K/V: pass"), std::string::npos)
        << lines(probed);
  }
}

// Each selftest mutant's outputs on the contiguous twin are its outputs on the paged case (the same problem): the
// diagnosis of the paged case must name the same top tag as the contiguous one (before, the models read the pool
// [num_pages, Hkv, page_size, D] as if it were [B, Hkv, Lk, D]).
TEST(PagedDiagnosis, APagedFailureIsDiagnosedLikeItsContiguousTwin) {
  int compared = 0;
  for (const char* name : kPaged) {
    const Fixture f = paged_fixture(name);
    const Attended flat = gather_pages(f.problem, f.inputs);
    for (const mutants::Entry& m : mutants::catalogue()) {
      if (m.correct) continue;
      Outputs out;
      if (!run_impl(*m.impl, flat.p, flat.in, out).ok || judge(flat.p, f.expected, out, f.tolerance).pass) continue;
      diagnose::Options o;
      o.tolerance = f.tolerance;
      const diagnose::Diagnosis twin = diagnose::diagnose({{}, flat.p, flat.in}, f.expected, out, o);
      const diagnose::Diagnosis paged = diagnose::diagnose({{}, f.problem, f.inputs}, f.expected, out, o);
      EXPECT_EQ(paged.top(), twin.top()) << m.impl->name() << " on " << name << "\n"
                                         << lines(paged) << "twin:\n"
                                         << lines(twin);
      ++compared;
    }
  }
  EXPECT_GT(compared, 20);
}

}  // namespace
}  // namespace attncheck
