// Paged KV cache (page_size, num_pages, block_table): the pages read back as the contiguous K/V they stand for,
// unused slots are NaN, every implementation that declares it matches the reference, the property
// paged_equals_contiguous holds for cpu and kills a kernel that ignores the block table, and validation names the
// field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attncheck/backward.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "impl_check.hpp"
#include "properties.hpp"

namespace attncheck {
namespace {

std::vector<Problem> paged_problems() {
  std::vector<Problem> v;
  auto make = [&](DType t, int64_t Lk, int64_t P, int64_t pages, std::vector<int64_t> table, auto&& tweak) {
    Problem p;
    p.dtype = t, p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 3, p.Lk = Lk, p.Dqk = 16, p.Dv = 8, p.want_lse = true;
    p.page_size = P, p.num_pages = pages, p.block_table = table;
    tweak(p);
    v.push_back(p);
  };
  // 5 does not divide 17; page 3 shared by both sequences' first block; pages 2, 4, 6 unused
  make(DType::f32, 17, 5, 10, {3, 7, 0, 9, 3, 1, 8, 5}, [](Problem& p) {
    p.key_lengths = {17, 12}, p.causal = true, p.alignment = Alignment::bottom_right;
  });
  make(DType::f64, 40, 16, 6, {5, 0, 2, 1, 3, 4}, [](Problem& p) { p.layout = Layout::BSHD, p.want_weights = true; });
  make(DType::bf16, 7, 1, 15, {14, 0, 13, 1, 12, 2, 11, 3, 10, 4, 9, 5, 8, 6}, [](Problem& p) {
    p.sinks = {0.5, 1, 2, -1}, p.softcap = 5;
  });
  return v;
}

TEST(Paged, GeneratedPagesHoldTheContiguousTokensAndNaNElsewhere) {
  const Problem p = paged_problems()[0];
  Problem flat = p;
  flat.page_size = flat.num_pages = 0, flat.block_table.clear();
  const Inputs whole = gen::generate_inputs(flat, gen::Distribution::normal, 3);
  const Inputs paged = gen::generate_inputs(p, gen::Distribution::normal, 3);
  ASSERT_EQ(paged.k.shape, (std::vector<int64_t>{10, 2, 5, 16}));
  const Attended a = gather_pages(p, paged);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < p.Lk; ++j) {
      // batch 1's first block is batch 0's page: batch 0's tokens there
      const int64_t from = b == 1 && j < 5 ? 0 : b;
      EXPECT_EQ(a.in.k.at(b, 1, j, 7), whole.k.at(from, 1, j, 7)) << b << " " << j;
      EXPECT_EQ(a.in.v.at(b, 0, j, 3), whole.v.at(from, 0, j, 3)) << b << " " << j;
    }
  for (int64_t page : {2, 4, 6})
    EXPECT_TRUE(std::isnan(paged.k.at(page, 0, 0, 0)) && std::isnan(paged.v.at(page, 1, 4, 7))) << page;
  EXPECT_TRUE(std::isnan(paged.k.at(5, 0, 2, 0))) << "the tail of batch 1's last page (keys 15, 16 of 17) is unused";
  EXPECT_FALSE(std::isnan(paged.k.at(5, 0, 1, 0)));
}

TEST(Paged, ImplementationsMatchTheReference) {
  expect_impls_match_reference(paged_problems(), [](Problem p) {
    std::reverse(p.block_table.begin(), p.block_table.end());  // the same pages read in the wrong order: wrong
    return p;
  });
}

TEST(Paged, PropertyHoldsForCpuAndKillsAKernelIgnoringTheBlockTable) {
  const CpuMutant bad("pages-in-order", [](const Impl& cpu, const Problem& p, const Inputs& in, Outputs& out) {
    Problem q = p;  // reads page b * n + block, as if the block table were the identity
    for (size_t e = 0; e < q.block_table.size(); ++e) q.block_table[e] = static_cast<int64_t>(e);
    cpu.run(q, in, out);
  });
  expect_property_kills("paged_equals_contiguous", bad, [](const prop::Case& c) {
    for (size_t e = 0; e < c.p.block_table.size(); ++e)
      if (c.p.block_table[e] != static_cast<int64_t>(e)) return true;
    return false;  // the identity table: the mutant would be right
  });
}

TEST(Paged, ValidationNamesTheField) {
  const auto message = validation_message;
  Problem p = paged_problems()[0];
  p.block_table.pop_back();
  EXPECT_NE(message(p).find("block_table must have B*ceil(Lk/page_size)=2*4 entries, got 7"), std::string::npos)
      << message(p);
  p = paged_problems()[0];
  p.block_table[5] = 10;
  EXPECT_NE(message(p).find("block_table[1][1] must be a page in [0, num_pages=10), got 10"), std::string::npos)
      << message(p);
  p = paged_problems()[0];
  p.past_len = 2;
  EXPECT_NE(message(p).find("KV-cache append into pages is not modelled"), std::string::npos) << message(p);
  p = Problem{};
  p.num_pages = 3;
  EXPECT_NE(message(p).find("num_pages and block_table need page_size > 0"), std::string::npos) << message(p);
}

TEST(Paged, NamesRoundTrip) {
  const Problem p = paged_problems()[0];
  EXPECT_NE(p.name().find("/page_size=5/num_pages=10/block_table=3,7,0,9,3,1,8,5"), std::string::npos) << p.name();
  EXPECT_EQ(parse_name(p.name()).block_table, p.block_table);
  EXPECT_NE(p.short_name().find("paged5"), std::string::npos) << p.short_name();
}

TEST(Paged, ThePluginReadsThroughTheBlockTableAndOthersAreNotOffered) {
  const Problem p = paged_problems()[0];
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 2);
  const ImplPtr v2 = load_plugin(EXAMPLE_PLUGIN_PATH), v1 = load_plugin(V1_PLUGIN_PATH);
  EXPECT_EQ(v1->supports(p).reason, "paged KV cache (block table) not supported");
  Outputs out;
  ASSERT_TRUE(run_impl(*v2, p, in, out).ok);
  const Verdict v = judge(p, expected_attention(p, in), out);
  EXPECT_TRUE(v.pass) << v.worst().describe();
  if (const ImplPtr emu = find_impl("cuda-emulated")) {  // braces: gtest macros expand to if/else (-Wdangling-else)
    EXPECT_EQ(emu->supports(p).reason, "paged KV cache (block table) not supported");
  }
  for (const char* name : {"cpu", "cpu-flash"})
    EXPECT_EQ(find_impl(name)->supports_backward(p).reason, "backward with a paged KV cache not implemented");
  EXPECT_EQ(v2->supports_backward(p).reason, "the example's backward does not read pages");
  EXPECT_THROW(reference_backward(p, in, make_dout(p)), std::invalid_argument);
}

}  // namespace
}  // namespace attncheck
