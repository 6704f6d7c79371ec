// The max-logit output (problem.hpp MaxLogitOut): the row maximum of the softmax input over visible keys, after the
// scale, softcap, bias and score modifications; the fill for a row with no visible key; per head the maximum over
// batches and queries. Expected values are written out here from the formula, never taken from the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attncheck/features.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// B = 2, one head, Lq = Lk = 3, D = 2, scale 0.5, softcap 2, causal with the diagonal one key left (offset -1):
// row 0 sees no key, row 1 key 0, row 2 keys 0 and 1; key 2 (huge) is never visible. Batch 1's queries are twice
// batch 0's. Scaled logits: b0 row 1: 0.5 * (2,0).(1,0) = 1; row 2: 0.5 * (1,1).(1,0) = 0.5, 0.5 * (1,1).(3,1) = 2;
// b1 doubles them. After the softcap 2 tanh(s / 2) the maxima are 2 tanh(1/2), 2 tanh(1) (b0) and 2 tanh(1),
// 2 tanh(2) (b1); before it, 1, 2 and 2, 4.
Problem hand_problem(DType t, MaxLogitOut form) {
  Problem p;
  p.B = 2, p.Hq = p.Hkv = 1, p.Lq = p.Lk = 3, p.Dqk = p.Dv = 2, p.dtype = t;
  p.scale = 0.5, p.softcap = 2.0, p.causal = true, p.alignment = Alignment::explicit_, p.causal_offset = -1;
  p.want_lse = true, p.max_logit = form;
  return p;
}

Inputs hand_inputs(const Problem& p) {
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2)};
  const double q[3][2] = {{5, -7}, {2, 0}, {1, 1}}, k[3][2] = {{1, 0}, {3, 1}, {1000, 1000}};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t d = 0; d < 2; ++d) {
        in.q.put(b, 0, i, d, q[i][d] * (b + 1));
        in.k.put(b, 0, i, d, k[i][d]);
        in.v.put(b, 0, i, d, double(i + d));
      }
  return in;
}

const std::vector<double> kRows = {-kInf, 2 * std::tanh(0.5), 2 * std::tanh(1.0),
                                   -kInf, 2 * std::tanh(1.0), 2 * std::tanh(2.0)};

void expect_rows(const std::vector<double>& got, double tol) {
  ASSERT_EQ(got.size(), kRows.size());
  for (size_t n = 0; n < kRows.size(); ++n) {
    if (std::isinf(kRows[n]))
      EXPECT_EQ(got[n], kRows[n]) << n;
    else
      EXPECT_NEAR(got[n], kRows[n], tol) << n;
  }
}

TEST(MaxLogit, ReferenceRowsAreTheCappedRowMaxima) {
  const Problem p = hand_problem(DType::f64, MaxLogitOut::rows);
  const ExpectedAttention r = expected_attention(p, hand_inputs(p));
  expect_rows(r.max_logit, 1e-15);
  Problem f = p;  // a finite fill: the row with no visible key holds it
  f.fill = MaskFill::finite, f.fill_value = -1e9;
  const ExpectedAttention rf = expected_attention(f, hand_inputs(f));
  EXPECT_EQ(rf.max_logit[0], -1e9);
  EXPECT_EQ(rf.max_logit[3], -1e9);
  EXPECT_NEAR(rf.max_logit[5], 2 * std::tanh(2.0), 1e-15);
  EXPECT_EQ(max_logit_heads(p, r.max_logit), std::vector<double>{r.max_logit[5]});
}

TEST(MaxLogit, ImplementationsDeliverBothFormsAndPass) {
  for (MaxLogitOut form : {MaxLogitOut::rows, MaxLogitOut::heads})
    for (bool finite : {false, true})
      for (const char* name : {"cpu", "cpu-flash", "reference"}) {
        Problem p = hand_problem(DType::f32, form);
        if (finite) p.fill = MaskFill::finite, p.fill_value = -1e9;
        const Inputs in = hand_inputs(p);
        Outputs out;
        ASSERT_TRUE(run_impl(*find_impl(name), p, in, out).ok) << name;
        ASSERT_TRUE(out.max_logit) << name;
        const std::vector<double> got = out.max_logit->to_double();
        const std::vector<double> want = form == MaxLogitOut::heads ? std::vector<double>{2 * std::tanh(2.0)} : kRows;
        ASSERT_EQ(got.size(), want.size()) << name;
        for (size_t n = 0; n < want.size(); ++n) {
          const double w = std::isinf(want[n]) && finite ? -1e9 : want[n];
          if (std::isinf(w))
            EXPECT_EQ(got[n], w) << name << " " << n;
          else
            EXPECT_NEAR(got[n], w, 1e-6) << name << " " << n;
        }
        EXPECT_TRUE(judge(p, expected_attention(p, in), out).pass) << name;
      }
}

// A kernel returning the max at another stage fails on max_logit alone (out and lse stay right).
TEST(MaxLogit, TheWrongStageFailsOnMaxLogit) {
  const Problem p = hand_problem(DType::f32, MaxLogitOut::rows);
  const Inputs in = hand_inputs(p);
  const ExpectedAttention r = expected_attention(p, in);
  Outputs out;
  ASSERT_TRUE(run_impl(*find_impl("cpu"), p, in, out).ok);
  const std::vector<std::vector<double>> wrong = {{-kInf, 1, 2, -kInf, 2, 4},   // before the softcap
                                                  {-kInf, 2, 4, -kInf, 4, 8}};  // unscaled dot products
  for (const auto& w : wrong) {
    for (size_t n = 0; n < w.size(); ++n) out.max_logit->set_offset(static_cast<int64_t>(n), w[n]);
    const Verdict v = judge(p, r, out);
    EXPECT_FALSE(v.pass);
    for (const TensorVerdict& t : v.tensors) EXPECT_EQ(t.pass, t.tensor != "max_logit") << t.tensor;
  }
  out.max_logit.reset();  // asked for and missing: fails
  EXPECT_FALSE(judge(p, r, out).pass);
  Problem h = hand_problem(DType::f32, MaxLogitOut::heads);  // heads: the max before the softcap, 4
  Outputs oh;
  ASSERT_TRUE(run_impl(*find_impl("cpu-flash"), h, in, oh).ok);
  oh.max_logit->set_offset(0, 4.0);
  EXPECT_FALSE(judge(h, expected_attention(h, in), oh).pass);
}

// Every feature the CPU kernels route around their kernel (GQA, bias, sinks, varlen with an empty sequence, paged,
// key padding with an empty batch, a finite fill) keeps the max-logit output within its tolerance.
TEST(MaxLogit, CpuKernelsMatchTheReferenceAcrossFeatures) {
  std::vector<Problem> ps;
  Problem a;
  a.B = 2, a.Hq = 4, a.Hkv = 2, a.Lq = 9, a.Lk = 70, a.Dqk = a.Dv = 16, a.dtype = DType::f16, a.softcap = 5;
  a.bias_shape = std::array<int64_t, 4>{1, 4, 9, 70}, a.max_logit = MaxLogitOut::rows, a.sinks = {0.5, -1, -kInf, 2};
  ps.push_back(a);
  Problem b = a;
  b.dtype = DType::bf16, b.bias_shape.reset(), b.sinks.clear(), b.key_lengths = {70, 0}, b.causal = true;
  b.alignment = Alignment::bottom_right, b.fill = MaskFill::finite, b.max_logit = MaxLogitOut::heads;
  ps.push_back(b);
  Problem c;
  c.B = 1, c.Hq = 2, c.Hkv = 1, c.Dqk = c.Dv = 16, c.cu_seqlens_q = {0, 3, 3, 8}, c.cu_seqlens_k = {0, 7, 7, 20};
  c.Lq = 8, c.Lk = 20, c.causal = true, c.alignment = Alignment::bottom_right, c.max_logit = MaxLogitOut::rows;
  ps.push_back(c);
  Problem d;
  d.B = 2, d.Lq = 3, d.Lk = 17, d.Dqk = d.Dv = 16, d.key_lengths = {17, 12}, d.causal = true,
  d.alignment = Alignment::bottom_right, d.page_size = 5;
  d.num_pages = 10, d.block_table = {3, 7, 0, 9, 3, 1, 8, 5}, d.max_logit = MaxLogitOut::rows, d.softcap = 3;
  ps.push_back(d);
  for (const Problem& p : ps) {
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 11);
    const ExpectedAttention r = expected_attention(p, in);
    for (const char* name : {"cpu", "cpu-flash"}) {
      Outputs out;
      const Support s = run_impl(*find_impl(name), p, in, out);
      ASSERT_TRUE(s.ok) << name << " " << p.name() << ": " << s.reason;
      const Verdict v = judge(p, r, out);
      EXPECT_TRUE(v.pass) << name << " " << p.name() << ": " << v.worst().describe();
      bool judged = false;
      for (const TensorVerdict& t : v.tensors) judged = judged || t.tensor == "max_logit";
      EXPECT_TRUE(judged) << name;
    }
  }
}

// Implementations that cannot return it refuse the problem: plugins that do not list "max_logit" (every plugin
// built before plugin.h's tag 10, the v1 ones). The CUDA kernels return it: tests/cuda/test_cuda_mods.cpp.
TEST(MaxLogit, OthersReportUnsupported) {
  const Problem p = hand_problem(DType::f32, MaxLogitOut::rows);
  std::vector<ImplPtr> others = {load_plugin(V1_PLUGIN_PATH), load_plugin(NO_MAX_LOGIT_PLUGIN_PATH)};
  for (const ImplPtr& impl : others) {
    const Support s = impl->supports(p);
    EXPECT_FALSE(s.ok) << impl->name();
    EXPECT_EQ(s.reason, "max-logit output not supported") << impl->name();
    Problem plain = p;
    plain.max_logit = MaxLogitOut::none;
    EXPECT_TRUE(impl->supports(plain).ok) << impl->name() << ": " << impl->supports(plain).reason;
  }
}

// Through the plugin ABI (tag 10): the example plugin writes both forms and passes; one taking the max before the
// scale fails on max_logit alone.
TEST(MaxLogit, PluginsDeliverItThroughTheExtension) {
  for (MaxLogitOut form : {MaxLogitOut::rows, MaxLogitOut::heads}) {
    const Problem p = hand_problem(DType::f32, form);
    const Inputs in = hand_inputs(p);
    const ExpectedAttention r = expected_attention(p, in);
    Outputs out;
    const ImplPtr good = load_plugin(EXAMPLE_PLUGIN_PATH);
    ASSERT_TRUE(good->capabilities().max_logit_out);
    ASSERT_TRUE(run_impl(*good, p, in, out).ok);
    const std::vector<double> got = out.max_logit->to_double();
    const std::vector<double> want = form == MaxLogitOut::heads ? std::vector<double>{2 * std::tanh(2.0)} : kRows;
    ASSERT_EQ(got.size(), want.size());
    for (size_t n = 0; n < want.size(); ++n)
      if (std::isinf(want[n]))
        EXPECT_EQ(got[n], want[n]) << n;
      else
        EXPECT_NEAR(got[n], want[n], 1e-6) << n;
    EXPECT_TRUE(judge(p, r, out).pass);
    Outputs bad;
    ASSERT_TRUE(run_impl(*load_plugin(MAX_LOGIT_BUG_PLUGIN_PATH), p, in, bad).ok);
    const Verdict v = judge(p, r, bad);
    EXPECT_FALSE(v.pass);
    for (const TensorVerdict& t : v.tensors) EXPECT_EQ(t.pass, t.tensor != "max_logit") << t.tensor;
  }
}

TEST(MaxLogit, NamesFixturesAndCandidatesKeepIt) {
  const Problem p = hand_problem(DType::f32, MaxLogitOut::heads);
  EXPECT_EQ(parse_name(p.name()).max_logit, MaxLogitOut::heads);
  EXPECT_NE(p.short_name().find("maxlogit-heads"), std::string::npos) << p.short_name();
  Problem bad = p;
  try {
    set_field_text(bad, *find_field("max_logit"), "cols");
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("max_logit: unknown value 'cols'"), std::string::npos) << e.what();
  }
  const std::string dir = testing::TempDir();
  const Inputs in = hand_inputs(p);
  write_fixture(dir + "/ml.h5", make_fixture("ml", p, in, Provenance{}));
  const Fixture f = read_fixture(dir + "/ml.h5");
  expect_rows(f.expected.max_logit, 1e-15);
  Outputs out;
  ASSERT_TRUE(run_impl(*find_impl("cpu"), p, in, out).ok);
  write_candidate(dir + "/ml_cand.h5", p, out);
  const Outputs back = read_candidate(dir + "/ml_cand.h5", p);
  ASSERT_TRUE(back.max_logit);
  EXPECT_EQ(back.max_logit->shape, std::vector<int64_t>{1});
  EXPECT_TRUE(judge(p, f.expected, back).pass);
}

}  // namespace
}  // namespace attncheck
