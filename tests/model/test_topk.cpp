// Top-k sparse attention (per query token a list of key positions, -1 = trailing padding; mods_library.cpp "topk"):
// the reference attends exactly the listed keys (bitwise the dense boolean mask of the same sets), a list holding
// every key equals dense attention bitwise, cpu and cpu-flash match the reference, a kernel that reads padding as
// key 0 is caught, and a malformed list is refused naming the query and the slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/rng.hpp"
#include "attncheck/tolerance.hpp"
#include "impl_check.hpp"

namespace attncheck {
namespace {

// Lists of `topk` slots: row (b, i) holds keys drawn without repetition from [1, Lk) (never key 0, so reading
// padding as key 0 changes the row), shuffled, the last `pad` slots -1.
Problem topk_problem(DType t, int64_t topk, int64_t pad, uint64_t seed) {
  Problem p;
  p.dtype = t, p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 6, p.Lk = 41, p.Dqk = 16, p.Dv = 8, p.want_lse = true;
  p.topk = topk;
  Rng r(seed);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < p.Lq; ++i) {
      std::vector<int64_t> keys(static_cast<size_t>(p.Lk - 1));
      std::iota(keys.begin(), keys.end(), 1);
      for (int64_t j = static_cast<int64_t>(keys.size()) - 1; j > 0; --j)
        std::swap(keys[size_t(j)], keys[size_t(r.pick(0, j))]);
      for (int64_t s = 0; s < topk; ++s) p.topk_indices.push_back(s < topk - pad ? keys[size_t(s)] : -1);
    }
  return p;
}

// The same problem with the lists as a dense boolean mask [B, 1, Lq, Lk].
Attended as_mask(const Problem& p, const Inputs& in) {
  Attended a{p, in};
  a.p.topk = 0, a.p.topk_indices.clear();
  a.p.mask_shape = std::array<int64_t, 4>{p.B, 1, p.Lq, p.Lk};
  Tensor m(DType::u8, {p.B, 1, p.Lq, p.Lk});
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < p.Lq; ++i)
      for (int64_t s = 0; s < p.topk; ++s)
        if (const int64_t j = p.topk_indices[size_t((b * p.Lq + i) * p.topk + s)]; j >= 0) m.put(b, 0, i, j, 1.0);
  a.in.mask = std::move(m);
  return a;
}

TEST(TopK, AttendsExactlyTheListedKeysAndAllKeysEqualsDenseBitwise) {
  for (const char* name : {"reference", "cpu", "cpu-flash"})
    for (DType t : {DType::f32, DType::bf16}) {
      const ImplPtr impl = find_impl(name);
      // k = 1 and a padded list: bitwise the dense mask of the same sets
      for (auto [k, pad] : {std::pair<int64_t, int64_t>{1, 0}, {9, 3}}) {
        const Problem p = topk_problem(t, k, pad, 3);
        const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 4);
        const Attended m = as_mask(p, in);
        Outputs a, b;
        ASSERT_TRUE(run_impl(*impl, p, in, a).ok) << name << " " << p.name();
        ASSERT_TRUE(run_impl(*impl, m.p, m.in, b).ok) << name;
        EXPECT_EQ(a.out.bytes, b.out.bytes) << name << " k=" << k;
        EXPECT_EQ(a.lse->bytes, b.lse->bytes) << name << " k=" << k;
      }
      // every key listed (in shuffled order): dense attention
      Problem p = topk_problem(t, 41, 1, 5);  // keys 1..40 shuffled, then slot 40 gets key 0
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t i = 0; i < p.Lq; ++i) p.topk_indices[size_t((b * p.Lq + i) * p.topk + 40)] = 0;  // key 0 too
      const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 6);
      Problem dense = p;
      dense.topk = 0, dense.topk_indices.clear();
      Outputs a, b;
      ASSERT_TRUE(run_impl(*impl, p, in, a).ok) << name;
      ASSERT_TRUE(run_impl(*impl, dense, in, b).ok) << name;
      EXPECT_EQ(a.out.bytes, b.out.bytes) << name;
      EXPECT_EQ(a.lse->bytes, b.lse->bytes) << name;
    }
}

TEST(TopK, ImplementationsMatchTheReferenceAndPaddingReadAsKeyZeroIsCaught) {
  std::vector<Problem> v;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    v.push_back(topk_problem(t, 7, 2, 11));
    Problem c = topk_problem(t, 12, 4, 12);
    c.causal = true, c.alignment = Alignment::bottom_right, c.layout = Layout::BSHD;
    v.push_back(c);
  }
  expect_impls_match_reference(v, [](Problem p) {
    p.topk = 0, p.topk_indices.clear();
    return p;
  });
  // a kernel that reads the padding index -1 as key 0
  const CpuMutant padding_as_zero("topk-padding",
                                  [](const Impl& cpu, const Problem& p, const Inputs& in, Outputs& out) {
                                    // the rows never list key 0 (topk_problem): each padded row attends key 0 as well,
                                    // the rest of its padding reading key 0 again
                                    Problem q = p;
                                    for (int64_t r = 0; r < p.B * p.Lq; ++r)
                                      for (int64_t s = 0; s < p.topk; ++s)
                                        if (q.topk_indices[size_t(r * p.topk + s)] == -1) {
                                          q.topk_indices[size_t(r * p.topk + s)] = 0;
                                          break;
                                        }
                                    cpu.run(q, in, out);
                                  });
  for (const Problem& p : v) {
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
    Outputs out;
    ASSERT_TRUE(run_impl(padding_as_zero, p, in, out).ok);
    EXPECT_FALSE(judge(p, expected_attention(p, in), out).pass) << p.name();
  }
}

TEST(TopK, MalformedListsAreRefusedNamingTheQueryAndSlot) {
  Problem p = topk_problem(DType::f32, 5, 2, 1);
  EXPECT_EQ(validation_message(p), "accepted");
  Problem q = p;
  q.topk_indices[size_t((1 * p.Lq + 2) * p.topk + 1)] = -1;  // batch 1, query 2: -1 in slot 1 before a key in slot 2
  EXPECT_NE(validation_message(q).find("topk_indices[b=1, query 2, slot 1] is -1 (padding) before the key"),
            std::string::npos)
      << validation_message(q);
  q = p, q.topk_indices[size_t(3 * p.topk + 0)] = 41;  // = Lk
  EXPECT_NE(validation_message(q).find("topk_indices[b=0, query 3, slot 0] must be a key in [0, Lk=41)"),
            std::string::npos)
      << validation_message(q);
  q = p, q.topk_indices[size_t(4 * p.topk + 0)] = -7;
  EXPECT_NE(validation_message(q).find("query 4, slot 0"), std::string::npos) << validation_message(q);
  q = p, q.topk_indices[size_t(1)] = q.topk_indices[size_t(0)];
  EXPECT_NE(validation_message(q).find("repeats key"), std::string::npos) << validation_message(q);
  q = p, q.topk_indices.pop_back();
  EXPECT_NE(validation_message(q).find("topk_indices must have B*Lq*topk=60 entries"), std::string::npos)
      << validation_message(q);
  EXPECT_EQ(parse_name(p.name()).name(), p.name());
}

}  // namespace
}  // namespace attncheck
