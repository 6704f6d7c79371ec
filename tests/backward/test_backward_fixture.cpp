// Gradients in fixtures and candidates: written and read back bit for bit, the gradient datasets declared by the
// `gradients` attribute (a missing or undeclared one is refused, naming it), forward-only fixtures unchanged, and
// candidate gradients judged by the gradient tolerance (the reference passes, a perturbed dk fails).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdio>
#include <filesystem>

#include "../golden/cli_util.hpp"
#include "attncheck/fixture_gradients.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/suite.hpp"
#include "attncheck/tolerance_backward.hpp"

using namespace attncheck;
namespace fs = std::filesystem;

namespace {
fs::path tmp_dir() { return fs::temp_directory_path() / ("attncheck_bwfix_" + std::to_string(::getpid())); }
fs::path tmp_file(const std::string& name) {
  fs::create_directories(tmp_dir());
  return tmp_dir() / name;
}
struct RemoveTemp : ::testing::Environment {
  void TearDown() override { fs::remove_all(tmp_dir()); }
};
const auto* const kRemoveTemp = ::testing::AddGlobalTestEnvironment(new RemoveTemp);

Fixture softcap_bias_fixture(Layout layout) {
  Problem p;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 5, p.Lk = 7, p.Dqk = 3, p.Dv = 6;
  p.dtype = DType::bf16;
  p.layout = layout;
  p.bias_shape = std::array<int64_t, 4>{1, 4, 5, 7};
  p.softcap = 2.0;
  p.causal = true;
  Fixture f = make_fixture("t/grad", p, gen::generate_inputs(p, gen::Distribution::normal, 3), {});
  add_gradients(f, 3);
  return f;
}

// Gradients of a fixture as a candidate delivers them (the reference's, rounded to the problem dtype).
Gradients reference_as_candidate(const Fixture& f) {
  Gradients g = make_gradients(f.problem);
  for (auto [t, v] : {std::pair{&g.dq, &f.grad->dq}, std::pair{&g.dk, &f.grad->dk}, std::pair{&g.dv, &f.grad->dv}}) {
    int64_t idx[4], n = 0;
    for (idx[0] = 0; idx[0] < t->shape[0]; ++idx[0])
      for (idx[1] = 0; idx[1] < t->shape[1]; ++idx[1])
        for (idx[2] = 0; idx[2] < t->shape[2]; ++idx[2])
          for (idx[3] = 0; idx[3] < t->shape[3]; ++idx[3]) t->set(idx, (*v)[static_cast<size_t>(n++)]);
  }
  for (size_t n = 0; n < f.grad->dbias.size(); ++n) g.dbias->set_offset(static_cast<int64_t>(n), f.grad->dbias[n]);
  return g;
}

Outputs reference_outputs(const Fixture& f) {
  const Problem& p = f.problem;
  Outputs out;
  out.out = Tensor(DType::f64, {p.B, p.Hq, p.Lq, p.Dv});
  for (size_t n = 0; n < f.expected.out.size(); ++n) out.out.set_offset(static_cast<int64_t>(n), f.expected.out[n]);
  return out;
}

// Deletes one object of a written fixture (a writer that forgot it).
void unlink(const fs::path& file, const char* path) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Ldelete(f, path, H5P_DEFAULT), 0);
  H5Fclose(f);
}

std::string read_error(const fs::path& file) {
  try {
    read_fixture(file.string());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(BackwardFixture, GradientsRoundTripInEveryLayout) {
  for (Layout l : {Layout::BHSD, Layout::BSHD}) {
    const Fixture f = softcap_bias_fixture(l);
    const fs::path file = tmp_file(std::string("rt_") + to_string(l) + ".h5");
    write_fixture(file.string(), f);
    EXPECT_TRUE(read_fixture_header(file.string()).has_gradients);
    const Fixture g = read_fixture(file.string());
    ASSERT_TRUE(g.has_gradients && g.dout && g.grad);
    EXPECT_EQ(g.dout->bytes, f.dout->bytes);
    EXPECT_EQ(g.dout->strides, f.dout->strides);
    using Field = std::vector<double> ExpectedGradients::*;
    for (Field m : std::initializer_list<Field>{
             &ExpectedGradients::dq, &ExpectedGradients::dk, &ExpectedGradients::dv, &ExpectedGradients::dbias,
             &ExpectedGradients::dq_abs, &ExpectedGradients::dk_abs, &ExpectedGradients::dv_abs,
             &ExpectedGradients::dbias_abs, &ExpectedGradients::dq_abs_unchained, &ExpectedGradients::dk_abs_unchained})
      EXPECT_EQ((*g.grad).*m, (*f.grad).*m) << to_string(l);
    EXPECT_FALSE(f.grad->dq_abs_unchained.empty());  // softcap: the unchained sums are stored too
  }
}

// A stored fixture is judged with the tolerance an in-memory judge gives: its scales that are not stored (the score
// modifications' curvature of a non-linear score expression, RoPE's angle sensitivities) are recomputed from its
// inputs.
TEST(BackwardFixture, StoredFixturesGetTheInMemoryGradientTolerance) {
  for (const char* name : {"fp32_B1-Hq2-Hkv1-Lq5-Lk9-D8_softcap-sexpr_normal_grad_expr-nonlinear.h5",
                           "fp32_B1-Hq2-Hkv1-Lq5-Lk9-D8_causal-br-rope_normal_grad_rope-neox-partial-64k.h5"}) {
    const Fixture f = read_fixture((fs::path(GOLDEN_DIR) / "backward" / name).string());
    ASSERT_TRUE(f.grad && f.dout) << name;
    const ExpectedAttention fwd = expected_attention(f.problem, f.inputs);
    const ExpectedGradients mem = expected_gradients(f.problem, f.inputs, *f.dout);
    EXPECT_EQ(f.grad->mod_curv, mem.mod_curv) << name;
    const GradTolerance a = grad_tolerance(f.problem, fwd, *f.grad), b = grad_tolerance(f.problem, fwd, mem);
    EXPECT_EQ(a.dq, b.dq) << name;
    EXPECT_EQ(a.dk, b.dk) << name;
    EXPECT_EQ(a.dv, b.dv) << name;
  }
}

TEST(BackwardFixture, ForwardOnlyFixtureHasNoGradients) {
  Fixture f = softcap_bias_fixture(Layout::BHSD);
  f.has_gradients = false;
  f.dout.reset();
  f.grad.reset();
  const fs::path file = tmp_file("fwd.h5");
  write_fixture(file.string(), f);
  const Fixture g = read_fixture(file.string());
  EXPECT_FALSE(g.has_gradients);
  EXPECT_FALSE(g.dout || g.grad);
}

TEST(BackwardFixture, MissingOrUndeclaredGradientDatasetsAreRefusedByName) {
  const Fixture f = softcap_bias_fixture(Layout::BHSD);
  const fs::path file = tmp_file("broken.h5");
  write_fixture(file.string(), f);
  unlink(file, "/expected/dk_abs");
  EXPECT_NE(read_error(file).find("/expected/dk_abs"), std::string::npos) << read_error(file);
  write_fixture(file.string(), f);
  unlink(file, "/expected/dbias");
  EXPECT_NE(read_error(file).find("/expected/dbias"), std::string::npos) << read_error(file);
  write_fixture(file.string(), f);
  {
    const hid_t h = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Adelete_by_name(h, "/", "gradients", H5P_DEFAULT), 0);
    H5Fclose(h);
  }
  const std::string e = read_error(file);
  EXPECT_NE(e.find("present but not declared by attribute gradients"), std::string::npos) << e;
}

TEST(BackwardFixture, CandidateGradientsAreJudged) {
  const Fixture f = softcap_bias_fixture(Layout::BSHD);
  Gradients g = reference_as_candidate(f);
  const Outputs out = reference_outputs(f);
  const fs::path file = tmp_file("cand.h5");
  write_candidate_gradients(file.string(), f.problem, out, g);
  const std::optional<Gradients> back = read_candidate_gradients(file.string(), f.problem);
  ASSERT_TRUE(back);
  EXPECT_TRUE(judge_backward(f.problem, f.expected, *f.grad, *back).pass);
  int64_t idx[4] = {1, 1, 6, 2};  // a key every query of batch 1 sees (causal, Lk - 1)
  g.dk.set(idx, g.dk.get(idx) * 1.01 + 1e-3);
  write_candidate_gradients(file.string(), f.problem, out, g);
  const Verdict v = judge_backward(f.problem, f.expected, *f.grad, *read_candidate_gradients(file.string(), f.problem));
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.worst().tensor, "dk");
}

// `attncheck compare` on a golden/backward fixture: the reference's gradients pass (a second row, "<name>/backward"),
// a wrong dv fails with exit 1, gradients against a forward-only fixture are an input error (exit 2).
TEST(BackwardFixture, CompareJudgesCandidateGradients) {
  const std::string fixture = std::string(GOLDEN_DIR) + "/backward/fp32_B2-Hq4-Hkv2-Lq13-Lk17-D8_plain_normal_grad.h5";
  const Fixture f = read_fixture(fixture);
  ASSERT_TRUE(f.has_gradients);
  Gradients g = reference_as_candidate(f);
  const fs::path file = tmp_file("cmp.h5");
  write_candidate_gradients(file.string(), f.problem, reference_outputs(f), g);
  const std::string cmd =
      std::string(ATTNCHECK_EXE) + " compare --name cand --expected " + fixture + " --actual " + file.string();
  auto r = test::run_shell(cmd);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("PASS        cand/backward"), std::string::npos) << r.out;
  int64_t idx[4] = {0, 1, 3, 5};
  g.dv.set(idx, g.dv.get(idx) + 0.5);
  write_candidate_gradients(file.string(), f.problem, reference_outputs(f), g);
  r = test::run_shell(cmd);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("dv[b=0,h=1,i=3,d=5]"), std::string::npos) << r.out;
  const std::string fwd_only = std::string(GOLDEN_DIR) + "/cases/fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5";
  const Fixture f16 = read_fixture(fwd_only);
  write_candidate_gradients(file.string(), f16.problem, reference_outputs(f16), make_gradients(f16.problem));
  r = test::run_shell(std::string(ATTNCHECK_EXE) + " compare --expected " + fwd_only + " --actual " + file.string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("has gradients but " + fwd_only + " has none"), std::string::npos) << r.out;
}
