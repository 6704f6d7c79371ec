// The plugin ABI end to end: the example plugin (examples/plugin, plain C) loads through load_plugin, reports its
// capabilities, is judged by the reference and the tolerance model like a built-in, and declines what it does not
// support. Broken builds of the same source (wrong ABI, missing entry, planted bug) must be caught.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attncheck/impl.hpp"
#include "attncheck/plugin.h"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

using namespace attncheck;

namespace {

// Signed values from a fixed-seed LCG, so a failure replays.
Inputs random_inputs(const Problem& p, uint64_t seed) {
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  auto rnd = [&] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return ((seed >> 11) * 0x1.0p-53) * 4 - 2;
  };
  for (Tensor* t : {&in.q, &in.k, &in.v})
    for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, rnd());
  if (p.mask_shape) {
    const auto& s = *p.mask_shape;
    in.mask = Tensor(DType::u8, {s[0], s[1], s[2], s[3]});
    for (int64_t n = 0; n < in.mask->numel(); ++n) in.mask->set_offset(n, rnd() > -1.0);  // ~75% visible
  }
  return in;
}

Problem base() {
  Problem p;
  p.B = 2;
  p.Hq = 4;
  p.Hkv = 2;
  p.Lq = 7;
  p.Lk = 13;
  p.Dqk = 9;
  p.Dv = 5;
  p.want_lse = p.want_weights = true;
  return p;
}

// Judge the plugin on one problem; returns the verdict and fails the test if the case was declined.
Verdict judge_case(const Impl& impl, const Problem& p, uint64_t seed) {
  const Inputs in = random_inputs(p, seed);
  Outputs out;
  const Support s = run_impl(impl, p, in, out);
  EXPECT_TRUE(s.ok) << p.name() << ": " << s.reason;
  if (!s.ok) return {};
  return judge(p, expected_attention(p, in), out);
}

}  // namespace

TEST(Plugin, LoadsAndReportsCapabilities) {
  const ImplPtr impl = load_plugin(EXAMPLE_PLUGIN_PATH);
  EXPECT_EQ(impl->name(), "example-plugin");
  EXPECT_NE(impl->description().find("fp32 loops"), std::string::npos) << impl->description();
  EXPECT_TRUE(impl->available().ok);
  const Capabilities c = impl->capabilities();
  EXPECT_EQ(c.dtypes, (std::set<DType>{DType::f32, DType::e4m3, DType::e5m2}));  // fp8 through its feature "fp8"
  EXPECT_EQ(c.layouts, (std::set<Layout>{Layout::BHSD, Layout::BSHD}));
  EXPECT_EQ(c.fully_masked, (std::set<FullyMasked>{FullyMasked::nan, FullyMasked::zero}));
  EXPECT_EQ(c.alignments.size(), 3u);
  EXPECT_TRUE(c.gqa && c.cross && c.causal && c.key_padding && c.bool_mask && c.window && c.logit.count("softcap"));
  EXPECT_FALSE(c.bias || c.dropout || c.finite_fill);
  EXPECT_NE(c.notes.find(EXAMPLE_PLUGIN_PATH), std::string::npos) << c.notes;
}

TEST(Plugin, PassesTheReferenceOnSupportedCases) {
  const ImplPtr impl = load_plugin(EXAMPLE_PLUGIN_PATH);
  Problem p = base();
  p.dtype = DType::f32;
  std::vector<Problem> cases;
  cases.push_back(p);
  Problem c = p;
  c.layout = Layout::BSHD;
  c.causal = true;
  c.alignment = Alignment::bottom_right;
  cases.push_back(c);
  c = p;
  c.causal = true;
  c.alignment = Alignment::explicit_;
  c.causal_offsets = {3, -2};
  cases.push_back(c);
  c = p;
  c.key_lengths = {13, 4};
  c.window_left = 3;
  c.window_right = 1;
  c.softcap = 2.0;
  cases.push_back(c);
  c = p;
  c.mask_shape = std::array<int64_t, 4>{2, 1, 7, 13};
  c.scale = -0.7;
  cases.push_back(c);
  // Fully-masked rows: key length 0 in batch 1, both policies the plugin declares.
  c = p;
  c.key_lengths = {5, 0};
  c.fully_masked = FullyMasked::nan;
  cases.push_back(c);
  c.fully_masked = FullyMasked::zero;
  cases.push_back(c);
  uint64_t seed = 1;
  for (const Problem& q : cases) {
    const Verdict v = judge_case(*impl, q, seed++);
    EXPECT_TRUE(v.pass) << q.name() << ": " << (v.tensors.empty() ? "no verdict" : v.worst().describe());
  }
}

TEST(Plugin, DeclinesUnsupportedCasesWithAReason) {
  const ImplPtr impl = load_plugin(EXAMPLE_PLUGIN_PATH);
  Problem p = base();
  p.dtype = DType::f16;
  Support s = impl->supports(p);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("fp16"), std::string::npos) << s.reason;
  p.dtype = DType::f32;
  p.bias_shape = std::array<int64_t, 4>{1, 1, 7, 13};
  s = impl->supports(p);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("bias"), std::string::npos) << s.reason;
  // The plugin's own per-problem supports(): its reason reaches the harness verbatim.
  p = base();
  p.dtype = DType::f32;
  p.Lk = 5000;
  s = impl->supports(p);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("Lk=5000 > 4096"), std::string::npos) << s.reason;
}

TEST(Plugin, APlantedBugFailsTheVerdict) {
  const ImplPtr impl = load_plugin(BUGGY_PLUGIN_PATH);
  EXPECT_EQ(impl->name(), "example-plugin-buggy");
  Problem p = base();
  p.dtype = DType::f32;
  const Verdict v = judge_case(*impl, p, 7);
  EXPECT_FALSE(v.pass) << "the buggy plugin drops a key from the softmax denominator and must fail";
}

TEST(Plugin, ARunErrorStatusBecomesAnExceptionWithThePluginsMessage) {
  const ImplPtr impl = load_plugin(FAILING_PLUGIN_PATH);
  Problem p = base();
  p.dtype = DType::f32;
  const Inputs in = random_inputs(p, 3);
  Outputs out;
  try {
    run_impl(*impl, p, in, out);
    FAIL() << "expected the plugin's error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("example-plugin-failing"), std::string::npos) << m;
    EXPECT_NE(m.find("planted failure: out of device memory for Lk=13"), std::string::npos) << m;
  }
}

TEST(Plugin, WrongAbiVersionIsAClearError) {
  try {
    load_plugin(BAD_ABI_PLUGIN_PATH);
    FAIL() << "expected PluginError";
  } catch (const PluginError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(BAD_ABI_PLUGIN_PATH), std::string::npos) << m;
    EXPECT_NE(m.find("ABI 999"), std::string::npos) << m;
    EXPECT_NE(m.find("ABI " + std::to_string(ATTNCHECK_PLUGIN_ABI_VERSION)), std::string::npos) << m;
  }
}

TEST(Plugin, MissingEntrySymbolIsAClearError) {
  try {
    load_plugin(NO_ENTRY_PLUGIN_PATH);
    FAIL() << "expected PluginError";
  } catch (const PluginError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(NO_ENTRY_PLUGIN_PATH), std::string::npos) << m;
    EXPECT_NE(m.find("attncheck_plugin_entry"), std::string::npos) << m;
    EXPECT_NE(m.find("undefined symbol"), std::string::npos) << "dlerror's own text is kept: " << m;
  }
}

TEST(Plugin, MissingFileIsAClearError) {
  EXPECT_THROW(load_plugin("/nonexistent/libnothing.so"), PluginError);
  try {
    load_plugin("/nonexistent/libnothing.so");
  } catch (const PluginError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/libnothing.so"), std::string::npos) << e.what();
  }
}

TEST(Plugin, RegistersLikeABuiltIn) {
  const ImplPtr impl = load_plugin(EXAMPLE_PLUGIN_PATH);
  register_impl(impl);
  EXPECT_EQ(find_impl("example-plugin"), impl);
  EXPECT_THROW(register_impl(load_plugin(EXAMPLE_PLUGIN_PATH)), std::invalid_argument) << "names are unique";
}
