// The CUDA kernels (1: straightforward, 2: fused flash) on the host emulation, judged against the looped
// reference with the derived tolerances, on hostile cases; each run in forward and reversed thread order.
// The `cuda` device backend runs the same cases when a device is present, and is skipped (not passed) otherwise.
#include <gtest/gtest.h>

#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "emulated.hpp"
#include "hostile_cases.hpp"

using namespace attncheck;
using attncheck::cuda::KernelVersion;
using attncheck::testcases::Case;

namespace {

struct Param {
  Case c;
  KernelVersion version;
  bool weights;
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.c.label << " " << p.c.p.name(); }

std::string param_name(const testing::TestParamInfo<Param>& info) {
  std::string s = std::string(info.param.version == KernelVersion::naive ? "k1_" : "k2_") + info.param.c.label +
                  (info.param.weights ? "_weights" : "") + "_" + to_string(info.param.c.p.dtype);
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

std::vector<Param> params() {
  std::vector<Param> ps;
  for (const Case& c : testcases::hostile_cases()) {
    ps.push_back({c, KernelVersion::flash, false});
    ps.push_back({c, KernelVersion::naive, false});
    ps.push_back({c, KernelVersion::naive, true});
  }
  return ps;
}

// Outputs that pass the tolerance check must also not be trivially right: a non-zero reference needs a non-zero
// answer (NaN poisoning already fails unwritten elements).
void expect_nontrivial(const ExpectedAttention& r, const Outputs& out) {
  bool ref_nonzero = false, out_nonzero = false;
  const std::vector<double> got = out.out.to_double();
  for (size_t n = 0; n < r.out.size(); ++n) {
    ref_nonzero = ref_nonzero || (std::isfinite(r.out[n]) && r.out[n] != 0);
    out_nonzero = out_nonzero || (std::isfinite(got[n]) && got[n] != 0);
  }
  if (ref_nonzero) {
    EXPECT_TRUE(out_nonzero) << "all-zero output where the reference is not zero";
  }
}

void judge_and_report(const Problem& p, const ExpectedAttention& ref, const Outputs& out, const std::string& who) {
  const Verdict v = judge(p, ref, out);
  for (const auto& t : v.tensors) EXPECT_TRUE(t.pass) << who << " " << p.name() << ": " << t.describe();
  expect_nontrivial(ref, out);
}

class CudaKernel : public testing::TestWithParam<Param> {};

TEST_P(CudaKernel, MatchesReferenceInBothThreadOrders) {
  Param prm = GetParam();
  Problem p = prm.c.p;
  p.want_weights = prm.weights;
  Case c = prm.c;
  c.p = p;
  const Inputs in = testcases::make_inputs(c);
  const ExpectedAttention ref = expected_attention(p, in);
  Outputs out = make_outputs(p);
  out.out.fill(std::nan(""));
  if (out.lse) out.lse->fill(std::nan(""));
  if (out.weights) out.weights->fill(std::nan(""));
  Outputs reversed = out;  // the same poison
  cuda::run_emulated(p, in, out, prm.version, emu::Order::forward);
  cuda::run_emulated(p, in, reversed, prm.version, emu::Order::reversed);
  EXPECT_EQ(out.out.bytes, reversed.out.bytes) << "out depends on the thread order (a race)";
  if (out.lse) {
    EXPECT_EQ(out.lse->bytes, reversed.lse->bytes) << "lse depends on the thread order (a race)";
  }
  if (out.weights) {
    EXPECT_EQ(out.weights->bytes, reversed.weights->bytes) << "weights depend on the thread order (a race)";
  }
  judge_and_report(p, ref, out, param_name({prm, 0}));
}

INSTANTIATE_TEST_SUITE_P(Hostile, CudaKernel, testing::ValuesIn(params()), param_name);

TEST(CudaKernelLimits, FusedKernelRefusesWeights) {
  Problem p;
  p.want_weights = true;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  Outputs out = make_outputs(p);
  EXPECT_THROW(cuda::run_emulated(p, in, out, KernelVersion::flash, emu::Order::forward), std::invalid_argument);
}

// Through the registry, the way `attncheck verify` and the property suite run it.
TEST(CudaEmulatedImpl, RegisteredAvailableAndCorrect) {
  const ImplPtr impl = find_impl("cuda-emulated");
  ASSERT_TRUE(impl) << "cuda-emulated is not registered";
  EXPECT_TRUE(impl->available().ok);
  for (const Case& c : testcases::hostile_cases()) {
    const Inputs in = testcases::make_inputs(c);
    const ExpectedAttention ref = expected_attention(c.p, in);
    Outputs out;
    const Support s = run_impl(*impl, c.p, in, out);
    ASSERT_TRUE(s.ok) << c.label << ": " << s.reason;
    judge_and_report(c.p, ref, out, "cuda-emulated/" + c.label);
  }
}

TEST(CudaEmulatedImpl, UnsupportedIsReportedNotRun) {
  const ImplPtr impl = find_impl("cuda-emulated");
  ASSERT_TRUE(impl);
  Problem p;
  p.Dqk = 600;
  EXPECT_FALSE(impl->supports(p).ok);
  EXPECT_NE(impl->supports(p).reason.find("head dim"), std::string::npos) << impl->supports(p).reason;
  p.Dqk = 8;
  p.fill = MaskFill::finite;
  p.fill_value = -1e300;
  EXPECT_FALSE(impl->supports(p).ok) << "fill beyond the fp32 range with fp32 accumulation";
  p.dtype = DType::f64;
  EXPECT_TRUE(impl->supports(p).ok) << impl->supports(p).reason;
}

TEST(CudaDeviceImpl, MatchesReferenceOnADevice) {
  const ImplPtr impl = find_impl("cuda");
  if (!impl) GTEST_SKIP() << "built without nvcc: no `cuda` backend";
  const Support a = impl->available();
  if (!a.ok) {
    EXPECT_NE(a.reason.find("no CUDA device"), std::string::npos) << a.reason;
    GTEST_SKIP() << "cuda unavailable: " << a.reason;
  }
  for (const Case& c : testcases::hostile_cases())
    for (bool weights : {false, true}) {
      Problem p = c.p;
      p.want_weights = weights;
      Case cw = c;
      cw.p = p;
      const Inputs in = testcases::make_inputs(cw);
      const ExpectedAttention ref = expected_attention(p, in);
      Outputs out;
      const Support s = run_impl(*impl, p, in, out);
      ASSERT_TRUE(s.ok) << c.label << ": " << s.reason;
      judge_and_report(p, ref, out, "cuda/" + c.label);
    }
}

}  // namespace
