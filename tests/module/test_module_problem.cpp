// The module problem and its fp64 reference: the [out, in] weight convention and the single-head example by hand,
// the packed and interleaved row orders written out by hand, agreement with the older module.hpp code (Linear
// [in, out], reference_mha) on GQA cross attention with biases and Dqk != Dv, averaged weights, and validation
// errors that name the field.
#include <gtest/gtest.h>

#include <cmath>

#include "attncheck/module.hpp"
#include "attncheck/module_problem.hpp"
#include "attncheck/module_suite.hpp"
#include "attncheck/module_reference.hpp"

using namespace attncheck;

namespace {

void set2(Tensor& t, std::vector<double> v) {
  ASSERT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (size_t n = 0; n < v.size(); ++n) t.set_offset(static_cast<int64_t>(n), v[n]);
}

ModuleProblem small(DType t, int64_t Hq, int64_t Hkv, Packing pk, bool bias) {
  ModuleProblem m;
  m.attn.dtype = t;
  m.attn.B = 2, m.attn.Lq = m.attn.Lk = 3, m.attn.Hq = Hq, m.attn.Hkv = Hkv, m.attn.Dqk = 2, m.attn.Dv = 3;
  m.attn.want_weights = true;
  m.d_in = 5, m.d_out = 4, m.packing = pk, m.qkv_bias = bias, m.out_bias = bias;
  return m;
}

// The rows of `w` [rows, in] in the order `order` (a list of source rows).
Tensor rows(const Tensor& w, const std::vector<int64_t>& order) {
  const int64_t in = w.rank() == 2 ? w.shape[1] : 1;
  Tensor r(w.dtype, w.rank() == 2 ? std::vector<int64_t>{int64_t(order.size()), in}
                                  : std::vector<int64_t>{int64_t(order.size())});
  for (size_t o = 0; o < order.size(); ++o)
    for (int64_t e = 0; e < in; ++e) r.set_offset(int64_t(o) * in + e, w.get_offset(order[o] * in + e));
  return r;
}

void expect_same(const ModuleResult& a, const ModuleResult& b, double tol) {
  ASSERT_EQ(a.y.size(), b.y.size());
  for (size_t n = 0; n < a.y.size(); ++n) EXPECT_NEAR(a.y[n], b.y[n], tol) << "y[" << n << "]";
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t n = 0; n < a.weights.size(); ++n) EXPECT_NEAR(a.weights[n], b.weights[n], tol) << "weights[" << n << "]";
}

}  // namespace

TEST(ModuleProblem, SingleHeadByHandWithTorchWeightLayout) {
  // Two one-hot tokens. Weights are [out, in]: q = 1 for both tokens, k = (0, log 3) -> weights (1/4, 3/4);
  // v = (4, 8) + 1 = (5, 9) -> 8; y = 8 * (1, -1) + (0.5, 0) = (8.5, -8).
  ModuleProblem m;
  m.attn.dtype = DType::f64, m.attn.Lq = m.attn.Lk = 2, m.attn.scale = 1.0, m.attn.want_weights = true;
  m.d_in = 2, m.d_out = 2, m.qkv_bias = true, m.out_bias = true;
  ModuleInputs in = make_module_inputs(m);
  set2(in.x, {1, 0, 0, 1});
  set2(*in.wq, {1, 1});
  set2(*in.wk, {0, std::log(3.0)});
  set2(*in.wv, {4, 8});
  set2(*in.bv, {1});
  set2(in.wo, {1, -1});  // [d_out=2, 1]
  set2(*in.bo, {0.5, 0});
  const ModuleResult r = reference_module(m, in);
  for (int t = 0; t < 2; ++t) {
    EXPECT_NEAR(r.y[size_t(t * 2)], 8.5, 1e-14);
    EXPECT_NEAR(r.y[size_t(t * 2 + 1)], -8.0, 1e-14);
    EXPECT_NEAR(r.weights[size_t(t * 2 + 1)], 0.75, 1e-15);
  }
}

TEST(ModuleProblem, PackedAndInterleavedRowOrdersByHand) {
  // Hq = 4, Hkv = 2 (G = 2), Dqk = 2, Dv = 3: q rows 0..7, k rows 8..11, v rows 12..17 of the separate weights
  // stacked. packed = [q | k | v]; interleaved = per KV head [q_{2g} q_{2g+1} | k_g | v_g].
  ModuleProblem sep = small(DType::f64, 4, 2, Packing::separate, true);
  const ModuleInputs si = generate_module_inputs(sep, 7);
  Tensor all(DType::f64, {18, 5}), ball(DType::f64, {18});
  auto copy = [&](const Tensor& w, const Tensor& b, int64_t r0) {
    for (int64_t r = 0; r < w.shape[0]; ++r) {
      for (int64_t e = 0; e < 5; ++e) all.set_offset((r0 + r) * 5 + e, w.get_offset(r * 5 + e));
      ball.set_offset(r0 + r, b.get_offset(r));
    }
  };
  copy(*si.wq, *si.bq, 0), copy(*si.wk, *si.bk, 8), copy(*si.wv, *si.bv, 12);
  const std::vector<int64_t> packed = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
  const std::vector<int64_t> inter = {0, 1, 2, 3, 8,  9,  12, 13, 14,   // KV head 0: q0 q1 | k0 | v0
                                      4, 5, 6, 7, 10, 11, 15, 16, 17};  // KV head 1: q2 q3 | k1 | v1
  const ModuleResult want = reference_module(sep, si);
  for (auto [pk, order] : {std::pair{Packing::packed, packed}, std::pair{Packing::interleaved, inter}}) {
    ModuleProblem m = sep;
    m.packing = pk;
    ModuleInputs in = si;
    in.wq.reset(), in.wk.reset(), in.wv.reset(), in.bq.reset(), in.bk.reset(), in.bv.reset();
    in.wqkv = rows(all, order), in.bqkv = rows(ball, order);
    SCOPED_TRACE(to_string(pk));
    expect_same(reference_module(m, in), want, 1e-13);
    // The other packing's order is a different module (the qkv-order bug changes the result).
    const ModuleResult wrong = reference_module(m, in, ModuleFault::qkv_order);
    double diff = 0;
    for (size_t n = 0; n < want.y.size(); ++n) diff = std::max(diff, std::fabs(wrong.y[n] - want.y[n]));
    EXPECT_GT(diff, 1e-3);
  }
}

TEST(ModuleProblem, AgreesWithReferenceMhaOnGqaCrossWithBiases) {
  // module.hpp's reference_mha (Linear stored [in, out]) computes the same module from transposed weights.
  ModuleProblem m = small(DType::f64, 4, 2, Packing::separate, true);
  m.d_in2 = 6, m.attn.Lk = 5, m.attn.causal = true, m.attn.alignment = Alignment::bottom_right;
  const ModuleInputs in = generate_module_inputs(m, 11);
  auto lin = [](const Tensor& w, const std::optional<Tensor>& b) {
    Linear l{w.shape[1], w.shape[0], std::vector<double>(size_t(w.numel())), {}};
    for (int64_t o = 0; o < l.out; ++o)
      for (int64_t e = 0; e < l.in; ++e) l.w[size_t(e * l.out + o)] = w.get_offset(o * l.in + e);
    if (b) l.b = b->to_double();
    return l;
  };
  MhaWeights w;
  w.wq = lin(*in.wq, in.bq), w.wk = lin(*in.wk, in.bk), w.wv = lin(*in.wv, in.bv), w.wo = lin(in.wo, in.bo);
  auto seq = [](const Tensor& t) { return Seq{t.shape[0], t.shape[1], t.shape[2], t.to_double()}; };
  const Seq xq = seq(in.x), xkv = seq(*in.x2);
  Problem a = m.attn;
  const MhaResult old = reference_mha(a, w, xq, &xkv);
  const ModuleResult now = reference_module(m, in);
  ASSERT_EQ(old.out.x.size(), now.y.size());
  for (size_t n = 0; n < now.y.size(); ++n) EXPECT_NEAR(now.y[n], old.out.x[n], 1e-12);
  ASSERT_EQ(old.attn.weights.size(), now.weights.size());
  for (size_t n = 0; n < now.weights.size(); ++n) EXPECT_NEAR(now.weights[n], old.attn.weights[n], 1e-14);
}

TEST(ModuleProblem, AveragedWeightsAreTheMeanOverHeads) {
  ModuleProblem m = small(DType::f64, 4, 4, Packing::packed, false);
  const ModuleInputs in = generate_module_inputs(m, 5);
  const ModuleResult per_head = reference_module(m, in);
  m.average_weights = true;
  const ModuleResult avg = reference_module(m, in);
  ASSERT_EQ(avg.weights.size(), per_head.weights.size() / 4);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t n = 0; n < 9; ++n) {
      double s = 0;
      for (int64_t h = 0; h < 4; ++h) s += per_head.weights[size_t((b * 4 + h) * 9 + n)];
      EXPECT_NEAR(avg.weights[size_t(b * 9 + n)], s / 4, 1e-15);
    }
  for (size_t n = 0; n < avg.y.size(); ++n) EXPECT_EQ(avg.y[n], per_head.y[n]);
}

TEST(ModuleProblem, ShapesThatDoNotChainNameTheField) {
  ModuleProblem m = small(DType::f32, 2, 2, Packing::separate, true);
  ModuleInputs in = make_module_inputs(m);
  auto msg = [&](const ModuleInputs& bad) {
    try {
      validate(m, bad);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  ModuleInputs a = in;
  a.wk = Tensor(DType::f32, {4, 4});  // in-features 4 against x's 5
  EXPECT_EQ(msg(a), "wk: shape [4,4] does not chain: expected [4,5]");
  ModuleInputs b = in;
  b.wo = Tensor(DType::f32, {4, 5});  // Hq*Dv = 6 merged features
  EXPECT_EQ(msg(b), "wo: shape [4,5] does not chain: expected [4,6]");
  ModuleInputs c = in;
  c.bo.reset();
  EXPECT_EQ(msg(c), "bo: missing (out_bias is on)");
  ModuleInputs d = in;
  d.wqkv = Tensor(DType::f32, {14, 5});
  EXPECT_EQ(msg(d), "wqkv: given, but separate weights");
  ModuleProblem cross = m;
  cross.d_in2 = 3, cross.packing = Packing::packed;
  EXPECT_THROW(
      {
        try {
          validate(cross);
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("d_in2"), std::string::npos) << e.what();
          throw;
        }
      },
      std::invalid_argument);
}

TEST(ModuleProblem, FaultsApplyOnlyWhereTheyCanShow) {
  ModuleProblem m = small(DType::f32, 1, 1, Packing::separate, false);
  EXPECT_FALSE(fault_applies(ModuleFault::head_split, m));  // one head: the view is the transpose
  EXPECT_FALSE(fault_applies(ModuleFault::out_bias, m));
  EXPECT_FALSE(fault_applies(ModuleFault::qkv_order, m));
  m.attn.Hq = m.attn.Hkv = 2, m.out_bias = true, m.packing = Packing::packed;
  EXPECT_TRUE(fault_applies(ModuleFault::head_split, m));
  EXPECT_TRUE(fault_applies(ModuleFault::out_bias, m));
  EXPECT_TRUE(fault_applies(ModuleFault::qkv_order, m));
  EXPECT_TRUE(fault_applies(ModuleFault::scale_d_model, m));
  EXPECT_FALSE(fault_applies(ModuleFault::dropout_after_projection, m));
  for (ModuleFault f : module_faults()) EXPECT_EQ(module_fault_from_string(to_string(f)), f);
}
