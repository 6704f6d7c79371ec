// The module route end to end on the suite (built in memory, so these tests do not depend on golden/): the cpu
// and cpu-flash module entries pass every case, every module mutant is caught and diagnosed with its own tag,
// unwritten outputs fail, the tolerance is tight enough to fail a small error, and fixtures round-trip.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "attncheck/module_suite.hpp"
#include "attncheck/module_tolerance.hpp"
#include "module_check.hpp"

using namespace attncheck;

namespace {

const std::vector<ModuleFixture>& suite() {
  static const std::vector<ModuleFixture> s = module_suite();
  return s;
}

class NothingWritten final : public ModuleImpl {
 public:
  std::string name() const override { return "nothing"; }
  Support supports(const ModuleProblem&) const override { return Support::yes(); }
  void run(const ModuleProblem&, const ModuleInputs&, ModuleOutputs&) const override {}
};

}  // namespace

TEST(ModuleCheck, SuiteCoversEveryModuleKindAndDtype) {
  int cross = 0, packed = 0, inter = 0, bias = 0, nobias = 0, causal = 0, multi = 0, drop = 0, avg = 0;
  std::set<DType> dtypes;
  for (const ModuleFixture& f : suite()) {
    const ModuleProblem& m = f.problem;
    cross += m.cross(), packed += m.packing == Packing::packed, inter += m.packing == Packing::interleaved;
    bias += m.qkv_bias, nobias += !m.qkv_bias, causal += m.attn.causal, multi += m.attn.Hq > 1;
    drop += m.attn.dropout_p > 0, avg += m.average_weights;
    dtypes.insert(m.attn.dtype);
  }
  EXPECT_GE(suite().size(), 30u);
  for (int n : {cross, packed, inter, bias, nobias, causal, multi, drop, avg}) EXPECT_GT(n, 0);
  EXPECT_EQ(dtypes, (std::set<DType>{DType::f32, DType::f16, DType::bf16}));
}

TEST(ModuleCheck, CpuEntriesPassEveryCase) {
  for (const char* name : {"cpu", "cpu-flash"}) {
    const ModuleImplPtr e = find_module_entry(name);
    ASSERT_TRUE(e) << name;
    for (const ModuleFixture& f : suite()) {
      ModuleOutputs out;
      ASSERT_TRUE(run_module(*e, f.problem, f.inputs, out).ok) << f.name;
      const Verdict v = module_check::judge(f, module_tolerance(f.problem, f.inputs), out);
      EXPECT_TRUE(v.pass) << name << " " << f.name << ": " << v.worst().describe();
    }
  }
  EXPECT_FALSE(find_module_entry("reference"));  // no module entry: its module rows are unsupported
}

TEST(ModuleCheck, EveryMutantCaughtAndTagged) {
  const auto rows = module_check::selftest(suite());
  ASSERT_EQ(rows.size(), 2 + module_faults().size() + 2 + module_grad_faults().size());  // forward, then backward
  for (const auto& r : rows) {
    EXPECT_GT(r.applicable, 0) << r.impl;
    if (r.injected.empty()) {
      EXPECT_EQ(r.caught, 0) << r.impl << (r.other_tags.empty() ? "" : ": " + r.other_tags[0]);
    } else {
      EXPECT_GT(r.caught, 0) << r.impl;
      EXPECT_EQ(r.tagged, r.caught) << r.impl << (r.other_tags.empty() ? "" : ": " + r.other_tags[0]);
    }
  }
  EXPECT_TRUE(module_check::selftest_ok(rows));
}

TEST(ModuleCheck, UnwrittenOutputsFail) {
  const ModuleFixture& f = suite().front();
  ModuleOutputs out;
  ASSERT_TRUE(run_module(NothingWritten{}, f.problem, f.inputs, out).ok);
  EXPECT_FALSE(module_check::judge(f, module_tolerance(f.problem, f.inputs), out).pass);
}

TEST(ModuleCheck, ToleranceFailsASmallError) {
  // fp32 cases: one y element off by 1e-4 relative (far above fp32 rounding, far below any module bug) fails.
  const ModuleImplPtr e = find_module_entry("cpu");
  int checked = 0;
  for (const ModuleFixture& f : suite()) {
    if (f.problem.attn.dtype != DType::f32) continue;
    ModuleOutputs out;
    ASSERT_TRUE(run_module(*e, f.problem, f.inputs, out).ok);
    const double y0 = out.y.get_offset(0);
    out.y.set_offset(0, y0 + 1e-4 * std::max(1.0, std::fabs(y0)));
    EXPECT_FALSE(module_check::judge(f, module_tolerance(f.problem, f.inputs), out).pass) << f.name;
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(ModuleCheck, FixtureRoundTrip) {
  const std::string path = (std::filesystem::temp_directory_path() / "attncheck_module_roundtrip.h5").string();
  for (size_t k : {size_t{2}, size_t{13}, size_t{29}}) {
    const ModuleFixture& f = suite()[k];
    write_module_fixture(path, f);
    ASSERT_TRUE(is_module_fixture(path));
    const ModuleFixture g = read_module_fixture(path);
    EXPECT_EQ(g.name, f.name);
    EXPECT_EQ(g.problem.name(), f.problem.name());
    EXPECT_EQ(g.expected.y, f.expected.y);
    EXPECT_EQ(g.expected.weights, f.expected.weights);
    EXPECT_EQ(g.inputs.x.bytes, f.inputs.x.bytes);
    EXPECT_EQ(g.inputs.wo.bytes, f.inputs.wo.bytes);
    EXPECT_EQ(module_fixture_image(path, g), module_fixture_image(path, f));  // every tensor and attribute
  }
  std::filesystem::remove(path);
}
