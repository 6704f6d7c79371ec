// The CUDA backward kernels (row statistics, dK/dV, dQ, dBias) on the host emulation, judged against the reference
// gradients with the gradient tolerance: generated cases over every feature and dtype, the hostile cases (tile
// edges, NaN-poisoned unseen keys, fully masked rows under every policy), every tile configuration of the
// dispatch; each run in both thread orders. Unsupported cases are declared; the device backend runs the same cases
// on a device and is skipped (not passed) without one.
#include <gtest/gtest.h>

#include "attncheck/tolerance_backward.hpp"
#include "backward_cases.hpp"
#include "emulated.hpp"
#include "hostile_cases.hpp"

using namespace attncheck;
using attncheck::testcases::Case;

namespace {

// A reference gradient that is clearly not zero (some element beyond its tolerance) needs a non-zero answer (NaN
// poisoning already fails unwritten elements). Tiny references (below the fp16 floor, cancelling dS) may be met by 0.
void expect_nontrivial(const char* name, const std::vector<double>& ref, const std::vector<double>& tol,
                       const Tensor& got, const std::string& who) {
  bool ref_nonzero = false, got_nonzero = false;
  const std::vector<double> g = got.to_double();
  for (size_t n = 0; n < ref.size(); ++n) {
    ref_nonzero = ref_nonzero || (std::isfinite(ref[n]) && std::abs(ref[n]) > tol[n]);
    got_nonzero = got_nonzero || (std::isfinite(g[n]) && g[n] != 0);
  }
  if (ref_nonzero) {
    EXPECT_TRUE(got_nonzero) << who << ": all-zero " << name << " where the reference is not zero";
  }
}

// Runs `impl`'s forward and backward on a case and judges the gradients. Returns false when it declined the case.
bool check_backward(const Impl& impl, const Problem& problem, const Inputs& in, const Tensor& dout,
                    const std::string& who) {
  Problem p = problem;
  p.want_lse = true;
  Gradients g;
  const Support s = run_backward_impl(impl, p, in, dout, g);
  if (!s.ok) return false;
  const ExpectedAttention f = expected_attention(p, in);
  const ExpectedGradients r = expected_gradients(p, in, dout);
  const Verdict v = judge_backward(p, f, r, g);
  EXPECT_TRUE(v.pass) << who << " " << p.name() << "\n  " << v.worst().describe();
  const GradTolerance t = grad_tolerance(p, f, r);
  expect_nontrivial("dq", r.dq, t.dq, g.dq, who);
  expect_nontrivial("dk", r.dk, t.dk, g.dk, who);
  expect_nontrivial("dv", r.dv, t.dv, g.dv, who);
  if (g.dbias) expect_nontrivial("dbias", r.dbias, t.dbias, *g.dbias, who);
  return true;
}

ImplPtr emulated() {
  const ImplPtr impl = find_impl("cuda-emulated");
  EXPECT_TRUE(impl) << "cuda-emulated is not registered";
  return impl;
}

TEST(CudaBackward, GeneratedCasesMatchReferenceGradients) {
  const ImplPtr impl = emulated();
  ASSERT_TRUE(impl);
  static constexpr DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16};
  int ran = 0;
  for (uint64_t n = 0; n < 96; ++n) {
    const prop::Case c = gradtest::grad_case(n, 4000, dtypes[n % 4]);
    if (check_backward(*impl, c.p, c.in, gradtest::random_dout(c.p, n), "cuda-emulated/" + c.name())) ++ran;
  }
  EXPECT_GE(ran, 80) << "too many generated cases declined";
}

TEST(CudaBackward, HostileCasesMatchReferenceGradients) {
  const ImplPtr impl = emulated();
  ASSERT_TRUE(impl);
  for (const Case& c : testcases::hostile_cases()) {
    const Inputs in = testcases::make_inputs(c);
    EXPECT_TRUE(check_backward(*impl, c.p, in, gradtest::random_dout(c.p, 7), "cuda-emulated/" + c.label))
        << c.label << ": declined " << impl->supports_backward(c.p).reason;
  }
}

// Every (dtype, head dim) branch of plan_backward: fp32 and fp64 at head dims <= 64, <= 128, <= 256, with tails
// (Lq, Lk not multiples of any tile), GQA, Dqk != Dv, and a bias so that the dS workspace and dBias run too.
TEST(CudaBackward, EveryTileConfiguration) {
  const ImplPtr impl = emulated();
  ASSERT_TRUE(impl);
  for (DType t : {DType::f32, DType::f64})
    for (auto [dqk, dv] : {std::pair{40, 64}, std::pair{128, 72}, std::pair{136, 256}}) {
      Case c;
      c.label = "tiles";
      c.p.dtype = t;
      c.p.B = 1;
      c.p.Hq = 2;
      c.p.Hkv = 1;
      c.p.Lq = 35;
      c.p.Lk = 21;
      c.p.Dqk = dqk;
      c.p.Dv = dv;
      c.p.causal = true;
      c.p.alignment = Alignment::bottom_right;
      c.p.bias_shape = std::array<int64_t, 4>{1, 2, 35, 21};
      const Inputs in = testcases::make_inputs(c);
      EXPECT_TRUE(check_backward(*impl, c.p, in, gradtest::random_dout(c.p, 3), "cuda-emulated/tiles")) << c.p.name();
    }
}

TEST(CudaBackward, UnsupportedIsDeclaredWithTheReason) {
  const ImplPtr impl = emulated();
  ASSERT_TRUE(impl);
  Problem p;
  p.want_lse = true;
  EXPECT_TRUE(impl->supports_backward(p).ok) << impl->supports_backward(p).reason;
  p.Dqk = 300;
  EXPECT_NE(impl->supports_backward(p).reason.find("head dim"), std::string::npos) << impl->supports_backward(p).reason;
  p.Dqk = 8;
  p.sinks = std::vector<double>(static_cast<size_t>(p.Hq), 0.0);
  EXPECT_FALSE(impl->supports_backward(p).ok) << "sinks";
  p.sinks.clear();
  p.B = 4;
  p.Hq = p.Hkv = 16;
  p.Lq = p.Lk = 8192;  // dS workspace 4·16·8192²·4 bytes = 16 GiB
  p.bias_shape = std::array<int64_t, 4>{1, 1, 8192, 8192};
  EXPECT_NE(impl->supports_backward(p).reason.find("dS workspace"), std::string::npos)
      << impl->supports_backward(p).reason;
  p.bias_shape.reset();
  EXPECT_TRUE(impl->supports_backward(p).ok) << "without a bias no workspace is needed";
}

TEST(CudaBackward, MismatchedBuffersNameTheTensor) {
  Case c;
  c.label = "buffers";
  c.p.want_lse = true;
  const Inputs in = testcases::make_inputs(c);
  Outputs fwd = make_outputs(c.p);
  Gradients g = make_gradients(c.p);
  Tensor dout(DType::f64, {c.p.B, c.p.Hq, c.p.Lq, c.p.Dv});
  try {
    cuda::run_backward_emulated(c.p, in, fwd, dout, g, emu::Order::forward);
    ADD_FAILURE() << "an fp64 dout of an fp32 problem was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dout has dtype fp64"), std::string::npos) << e.what();
  }
  fwd.lse.reset();
  EXPECT_THROW(cuda::run_backward_emulated(c.p, in, fwd, make_dout(c.p), g, emu::Order::forward),
               std::invalid_argument);
}

TEST(CudaDeviceBackward, MatchesReferenceOnADevice) {
  const ImplPtr impl = find_impl("cuda");
  if (!impl) GTEST_SKIP() << "built without nvcc: no `cuda` backend";
  const Support a = impl->available();
  if (!a.ok) {
    EXPECT_NE(a.reason.find("no CUDA device"), std::string::npos) << a.reason;
    GTEST_SKIP() << "cuda unavailable: " << a.reason;
  }
  for (const Case& c : testcases::hostile_cases()) {
    const Inputs in = testcases::make_inputs(c);
    EXPECT_TRUE(check_backward(*impl, c.p, in, gradtest::random_dout(c.p, 7), "cuda/" + c.label)) << c.label;
  }
}

}  // namespace
