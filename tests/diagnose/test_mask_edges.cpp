// Mask-edge bugs that touch one key in a few rows (the causal diagonal or a window edge where it meets a key tile):
// the per-row key models find the key, and its place on the edge names the cause (causal-diagonal, window-edge),
// not a generic skipped key or a precision model. The candidates are the correct implementation whose rows on a
// tile edge come from the same implementation run with the edge moved by one key, so the bug acts only under its
// mask, as in a real kernel.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "attncheck/error_scales.hpp"
#include "diagnosis.hpp"
#include "mutants.hpp"

namespace attncheck {
namespace {

constexpr int64_t kTile = 16;

const Impl& correct_impl() {
  for (const mutants::Entry& m : mutants::catalogue())
    if (m.correct) return *m.impl;
  throw std::runtime_error("no correct variant in the mutant catalogue");
}

// Rows whose diagonal satisfies `on_edge` come from the problem with the edge moved by `edit`.
class EdgeBug final : public Impl {
 public:
  EdgeBug(std::function<bool(const Problem&, int64_t diag)> on_edge, std::function<void(Problem&)> edit)
      : on_edge_(std::move(on_edge)), edit_(std::move(edit)) {}
  std::string name() const override { return "edge-bug"; }
  std::string description() const override { return "one key off at a mask edge on a tile boundary"; }
  Capabilities capabilities() const override { return correct_impl().capabilities(); }
  Support supports(const Problem& p) const override { return correct_impl().supports(p); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    correct_impl().run(p, in, out);
    Problem q = p;
    edit_(q);
    Outputs moved;
    if (!run_impl(correct_impl(), q, in, moved).ok) return;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i) {
          if (!on_edge_(p, i + p.diagonal_offset(b))) continue;
          for (int64_t d = 0; d < p.Dv; ++d) out.out.put(b, h, i, d, moved.out.at(b, h, i, d));
          if (out.lse) out.lse->set_offset((b * p.Hq + h) * p.Lq + i, moved.lse->get_offset((b * p.Hq + h) * p.Lq + i));
        }
  }

 private:
  std::function<bool(const Problem&, int64_t)> on_edge_;
  std::function<void(Problem&)> edit_;
};

prop::Case make_case(bool causal, int64_t window_left) {
  prop::Case c;
  Problem& p = c.p;
  p.B = 1, p.Hq = 2, p.Hkv = 2, p.Lq = 12, p.Lk = 40, p.Dqk = p.Dv = 8, p.dtype = DType::f32, p.want_lse = true;
  p.causal = causal, p.window_left = window_left, p.window_right = causal ? -1 : 0;
  p.alignment = Alignment::bottom_right;
  std::mt19937_64 g(7);
  std::normal_distribution<double> n(0.0, 1.0);
  c.in.q = Tensor(p.dtype, {p.B, p.Hq, p.Lq, p.Dqk});
  c.in.k = Tensor(p.dtype, {p.B, p.Hkv, p.Lk, p.Dqk});
  c.in.v = Tensor(p.dtype, {p.B, p.Hkv, p.Lk, p.Dv});
  for (Tensor* t : {&c.in.q, &c.in.k, &c.in.v})
    for (int64_t k = 0; k < t->numel(); ++k) t->set_offset(k, n(g));
  return c;
}

diagnose::Diagnosis diagnose_with(const prop::Case& c, const Impl& bug, bool rerun) {
  Outputs out;
  EXPECT_TRUE(run_impl(bug, c.p, c.in, out).ok);
  const ExpectedAttention ref = expected_attention(c.p, c.in);
  EXPECT_FALSE(judge(c.p, ref, out).pass) << "the bug must be detected for the test to mean anything";
  diagnose::Options o;
  if (rerun) o.rerun = &bug;
  return diagnose::diagnose(c, ref, out, o);
}

TEST(MaskEdges, FutureKeyReadWhereTheDiagonalEndsATileIsCausalDiagonal) {
  const prop::Case c = make_case(true, -1);
  const EdgeBug bug([](const Problem&, int64_t diag) { return diag % kTile == kTile - 1; },
                    [](Problem& q) { q.alignment = Alignment::explicit_, q.causal_offset = q.Lk - q.Lq + 1; });
  const diagnose::Diagnosis d = diagnose_with(c, bug, false);
  EXPECT_EQ(d.top(), "causal-diagonal");
  EXPECT_NE(d.causes.front().evidence.find("one masked key read per row"), std::string::npos)
      << d.causes.front().evidence;
}

TEST(MaskEdges, DiagonalDroppedWhereItStartsATileIsCausalDiagonalWithTheCausalProbe) {
  const prop::Case c = make_case(true, -1);
  const EdgeBug bug([](const Problem& p, int64_t diag) { return p.causal && diag % kTile == 0; },
                    [](Problem& q) { q.alignment = Alignment::explicit_, q.causal_offset = q.Lk - q.Lq - 1; });
  const diagnose::Diagnosis d = diagnose_with(c, bug, true);
  EXPECT_EQ(d.top(), "causal-diagonal");
  EXPECT_NE(d.causes.front().evidence.find("causal removed: the failure disappears"), std::string::npos)
      << d.causes.front().evidence;
}

TEST(MaskEdges, KeyBeforeTheWindowReadWhereTheEdgeStartsATileIsWindowEdge) {
  const prop::Case c = make_case(false, 5);
  const EdgeBug bug(
      [](const Problem& p, int64_t diag) { return p.window_left >= 0 && (diag - p.window_left) % kTile == 0; },
      [](Problem& q) { q.window_left += 1; });
  const diagnose::Diagnosis d = diagnose_with(c, bug, false);
  EXPECT_EQ(d.top(), "window-edge");
  EXPECT_NE(d.causes.front().evidence.find("one masked key read per row"), std::string::npos)
      << d.causes.front().evidence;
}

}  // namespace
}  // namespace attncheck
