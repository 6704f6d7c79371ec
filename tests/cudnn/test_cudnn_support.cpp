// The cudnn backend's mapping of the problem model, checked without cuDNN: what it cannot express is reported
// unsupported with a reason naming the feature, before any graph is built; the registry lists it.
#include <gtest/gtest.h>

#include <functional>

#include "attncheck/impl.hpp"
#include "cudnn_support.hpp"

using namespace attncheck;
using attncheck::cudnn::cudnn_supports;

namespace {

Problem base() {
  Problem p;
  p.B = 2, p.Hq = 8, p.Hkv = 2, p.Lq = 97, p.Lk = 257, p.Dqk = p.Dv = 64;
  p.dtype = DType::f16;
  return p;
}

struct Unsupported {
  const char* name;
  std::function<void(Problem&)> change;
  const char* reason_contains;
};

class CudnnUnsupported : public ::testing::TestWithParam<Unsupported> {};

TEST_P(CudnnUnsupported, ReportedBeforeCudnnIsAsked) {
  Problem p = base();
  GetParam().change(p);
  validate(p);  // a valid problem of the model, just not one cuDNN can express
  const Support s = cudnn_supports(p);
  EXPECT_FALSE(s.ok) << p.name();
  EXPECT_NE(s.reason.find(GetParam().reason_contains), std::string::npos) << "reason: " << s.reason;
}

const Unsupported kUnsupported[] = {
    {"head_dim_68", [](Problem& p) { p.Dqk = p.Dv = 68; }, "multiples of 8"},
    {"head_dim_v_68", [](Problem& p) { p.Dv = 68; }, "multiples of 8"},
    {"head_dim_264", [](Problem& p) { p.Dqk = p.Dv = 264; }, "> 256"},
    {"fp64", [](Problem& p) { p.dtype = DType::f64; }, "dtype fp64"},
    {"softcap", [](Problem& p) { p.softcap = 30; }, "softcap"},
    {"window", [](Problem& p) { p.window_left = 16; }, "window"},
    {"bool_mask",
     [](Problem& p) {
       p.mask_shape = std::array<int64_t, 4>{2, 1, 97, 257};
     },
     "boolean mask"},
    {"bottom_right_with_dropout",
     [](Problem& p) { p.causal = true, p.alignment = Alignment::bottom_right, p.dropout_p = 0.1; },
     "bottom-right causal mask with dropout"},
    {"finite_fill", [](Problem& p) { p.fill = MaskFill::finite; }, "finite mask fill"},
    {"weights", [](Problem& p) { p.want_weights = true; }, "weights"},
    {"explicit_alignment", [](Problem& p) { p.causal = true, p.alignment = Alignment::explicit_, p.causal_offset = 3; },
     "alignment"},
    {"bias_fp64",
     [](Problem& p) {
       p.bias_shape = std::array<int64_t, 4>{1, 1, 97, 257}, p.bias_dtype = DType::f64;
     },
     "bias dtype"},
    {"bottom_right_with_bias",
     [](Problem& p) {
       p.causal = true, p.alignment = Alignment::bottom_right;
       p.bias_shape = std::array<int64_t, 4>{1, 8, 97, 257};
     },
     "bottom-right causal mask with additive bias"},
    {"empty_key_batch",
     [](Problem& p) {
       p.key_lengths = {5, 0};
     },
     "no valid key"},
    {"bottom_right_short_keys", [](Problem& p) { p.causal = true, p.alignment = Alignment::bottom_right, p.Lk = 50; },
     "no visible key"},
    {"bottom_right_short_padded_keys",
     [](Problem& p) {
       p.causal = true, p.alignment = Alignment::bottom_right, p.key_lengths = {257, 96};
     },
     "no visible key"},
};

INSTANTIATE_TEST_SUITE_P(Cudnn, CudnnUnsupported, ::testing::ValuesIn(kUnsupported),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(CudnnSupport, FeatureMatrixIsSupported) {
  // Guards the negative cases above against a supports() that rejects everything.
  std::vector<Problem> ok;
  for (DType dt : {DType::f16, DType::bf16, DType::f32})
    for (Layout l : {Layout::BHSD, Layout::BSHD}) {
      Problem p = base();
      p.dtype = dt, p.layout = l;
      ok.push_back(p);
    }
  Problem p = base();
  p.causal = true, p.alignment = Alignment::bottom_right, p.key_lengths = {257, 97}, p.want_lse = true;
  ok.push_back(p);
  p = base();
  p.causal = true, p.bias_shape = std::array<int64_t, 4>{2, 1, 1, 257}, p.bias_dtype = DType::f32;
  p.Hkv = 1, p.Dqk = 128, p.Dv = 256, p.scale = -0.25;
  ok.push_back(p);
  p = base();
  p.dropout_p = 0.25, p.causal = true, p.key_lengths = {1, 257};
  ok.push_back(p);
  for (const Problem& q : ok) {
    const Support s = cudnn_supports(q);
    EXPECT_TRUE(s.ok) << q.name() << ": " << s.reason;
  }
  // Zero is the one fully-masked policy: rows that a -inf bias masks fully come out 0 on a device.
  p = base();
  p.fully_masked = FullyMasked::nan;
  EXPECT_FALSE(cudnn_supports(p).ok) << p.name();
}

// What the graph expresses but a device measured wrong: the `cudnn` implementation refuses it (with the
// measurement in the reason), forward and backward apart, while cudnn_supports still maps it.
TEST(CudnnSupport, MeasuredWrongCasesAreRefusedByTheImplementation) {
  const ImplPtr impl = find_impl("cudnn");
  ASSERT_TRUE(impl);
  Problem fp32_dropout = base();
  fp32_dropout.dtype = DType::f32, fp32_dropout.dropout_p = 0.25;
  Problem fp32_d256 = base();
  fp32_d256.dtype = DType::f32, fp32_d256.Dqk = fp32_d256.Dv = 256;
  Problem half_dropout = base();
  half_dropout.dropout_p = 0.25;
  for (const Problem& p : {fp32_dropout, fp32_d256}) {
    validate(p);
    EXPECT_TRUE(cudnn_supports(p).ok) << p.name();
    const Support s = impl->supports(p);
    EXPECT_FALSE(s.ok) << p.name();
    EXPECT_NE(s.reason.find("measured"), std::string::npos) << s.reason;
  }
  validate(half_dropout);
  EXPECT_TRUE(impl->supports(half_dropout).ok) << half_dropout.name();  // the forward passed on the device
  const Support b = impl->supports_backward(half_dropout);
  EXPECT_FALSE(b.ok);
  EXPECT_NE(b.reason.find("measured"), std::string::npos) << b.reason;
}

TEST(CudnnSupport, RegisteredAndExplainsAvailability) {
  const ImplPtr impl = find_impl("cudnn");
  ASSERT_NE(impl, nullptr) << "the cudnn backend was built but is not in the registry";
  const Support a = impl->available();
  if (!a.ok) {
    EXPECT_FALSE(a.reason.empty());
  }
  // Unsupported cases are answered the same with or without a device.
  Problem p = base();
  p.softcap = 5;
  EXPECT_FALSE(impl->supports(p).ok);
}

TEST(CudnnSupport, RunWithoutDeviceIsUnavailableNotACrash) {
  const ImplPtr impl = find_impl("cudnn");
  ASSERT_NE(impl, nullptr);
  if (impl->available().ok) {
    GTEST_SKIP() << "a CUDA device is present: the run path is exercised by attncheck verify --impl cudnn";
  }
  Problem p = base();
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  Outputs out;
  const Support s = run_impl(*impl, p, in, out);
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.reason.rfind("unavailable: ", 0), 0u) << s.reason;
}

}  // namespace
