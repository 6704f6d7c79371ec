// Backward through the module: reference_module_backward against central finite differences of
// L = sum(dy * reference_module(...).y) for every element of every module input (x, x2, the weights and biases in
// each packing, Wo, bo, an attention bias), on GQA cross attention with causal bottom-right, packed self attention
// with key padding and dropout, interleaved GQA with an attention mask, and a per-head additive bias; all fp64.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "attncheck/module_problem.hpp"
#include "attncheck/module_suite.hpp"
#include "attncheck/rng.hpp"
#include "attncheck/module_reference.hpp"

using namespace attncheck;

namespace {

double loss(const ModuleProblem& m, const ModuleInputs& in, const std::vector<double>& dy) {
  const ModuleResult r = reference_module(m, in);
  double s = 0;
  for (size_t n = 0; n < dy.size(); ++n) s += dy[n] * r.y[n];
  return s;
}

// Every element of one input tensor (picked from a copy of the inputs by `pick`): the analytic gradient against the
// central difference.
void check_tensor(const ModuleProblem& m, ModuleInputs in, const std::function<Tensor&(ModuleInputs&)>& pick,
                  const std::vector<double>& grad, const std::vector<double>& dy, const std::string& name) {
  Tensor& t = pick(in);
  ASSERT_EQ(static_cast<int64_t>(grad.size()), t.numel()) << name;
  for (int64_t n = 0; n < t.numel(); ++n) {
    const double v = t.get_offset(n), h = 1e-5 * std::max(1.0, std::fabs(v));
    t.set_offset(n, v + h);
    const double up = loss(m, in, dy);
    t.set_offset(n, v - h);
    const double down = loss(m, in, dy);
    t.set_offset(n, v);
    const double fd = (up - down) / (2 * h), g = grad[static_cast<size_t>(n)];
    EXPECT_NEAR(g, fd, 1e-7 + 1e-6 * std::fabs(fd)) << name << "[" << n << "]";
  }
}

void check_all(const ModuleProblem& m, uint64_t seed) {
  const ModuleInputs in = generate_module_inputs(m, seed);
  std::vector<double> dy(static_cast<size_t>(m.attn.B * m.attn.Lq * m.d_out));
  Rng r(seed + 1);
  for (double& d : dy) d = r.normal();
  const ModuleGradients g = reference_module_backward(m, in, dy);
  double gmax = 0;
  for (double v : g.dx) gmax = std::max(gmax, std::fabs(v));
  EXPECT_GT(gmax, 1e-3);  // not a vacuous all-zero gradient
  check_tensor(
      m, in, [](ModuleInputs& i) -> Tensor& { return i.x; }, g.dx, dy, "dx");
  check_tensor(
      m, in, [](ModuleInputs& i) -> Tensor& { return i.wo; }, g.dwo, dy, "dwo");
  using M = std::optional<Tensor> ModuleInputs::*;
  const std::tuple<M, const std::vector<double>*, const char*> opts[] = {
      {&ModuleInputs::x2, &g.dx2, "dx2"},       {&ModuleInputs::wq, &g.dwq, "dwq"},
      {&ModuleInputs::wk, &g.dwk, "dwk"},       {&ModuleInputs::wv, &g.dwv, "dwv"},
      {&ModuleInputs::bq, &g.dbq, "dbq"},       {&ModuleInputs::bk, &g.dbk, "dbk"},
      {&ModuleInputs::bv, &g.dbv, "dbv"},       {&ModuleInputs::wqkv, &g.dwqkv, "dwqkv"},
      {&ModuleInputs::bqkv, &g.dbqkv, "dbqkv"}, {&ModuleInputs::bo, &g.dbo, "dbo"}};
  int present = 0;
  for (const auto& [member, grad, name] : opts) {
    if (!(in.*member)) {
      EXPECT_TRUE(grad->empty()) << name;
      continue;
    }
    ++present;
    const M mem = member;
    check_tensor(
        m, in, [mem](ModuleInputs& i) -> Tensor& { return *(i.*mem); }, *grad, dy, name);
  }
  EXPECT_GE(present, 2);
  if (in.bias)
    check_tensor(
        m, in, [](ModuleInputs& i) -> Tensor& { return *i.bias; }, g.dbias, dy, "dbias");
  EXPECT_EQ(g.dbias.empty(), !in.bias);
}

ModuleProblem base(int64_t Hq, int64_t Hkv, Packing pk) {
  ModuleProblem m;
  m.attn.dtype = DType::f64;
  m.attn.B = 2, m.attn.Lq = m.attn.Lk = 4, m.attn.Hq = Hq, m.attn.Hkv = Hkv, m.attn.Dqk = 3, m.attn.Dv = 2;
  m.d_in = 5, m.d_out = 3, m.packing = pk, m.qkv_bias = true, m.out_bias = true;
  return m;
}

}  // namespace

TEST(ModuleBackward, GqaCrossCausalBottomRightSeparate) {
  ModuleProblem m = base(4, 2, Packing::separate);
  m.d_in2 = 6, m.attn.Lk = 6, m.attn.causal = true, m.attn.alignment = Alignment::bottom_right;
  check_all(m, 41);
}

TEST(ModuleBackward, PackedSelfKeyPaddingDropout) {
  ModuleProblem m = base(2, 2, Packing::packed);
  m.attn.Dv = 3;
  m.attn.mask_shape = std::array<int64_t, 4>{2, 1, 1, 4};
  m.attn.dropout_p = 0.25, m.attn.dropout_seed = 9;
  check_all(m, 42);
}

TEST(ModuleBackward, InterleavedGqaAttentionMaskNoBiases) {
  ModuleProblem m = base(4, 2, Packing::interleaved);
  m.qkv_bias = false, m.attn.Dv = 3;
  m.attn.mask_shape = std::array<int64_t, 4>{1, 1, 4, 4};
  check_all(m, 43);
}

TEST(ModuleBackward, PackedCausalPerHeadAdditiveBias) {
  ModuleProblem m = base(2, 2, Packing::packed);
  m.attn.causal = true;
  m.attn.bias_shape = std::array<int64_t, 4>{1, 2, 4, 4};
  m.attn.bias_dtype = DType::f64;  // so that the differences perturb it exactly
  check_all(m, 44);
}
