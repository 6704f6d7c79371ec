// A quantized KV cache in pages (vLLM's and FlashInfer's serving layout): per-token and per-block scales sit in the
// page slot beside their codes. The paged cache attends exactly as the contiguous cache it was paged from (bit for
// bit), cpu and cpu-flash match the reference, a kernel taking a token's scale from its logical position instead of
// its page slot is caught, only the slots the block table names are checked, and backends that do not declare the
// combination are never offered it. Per-(batch, head) scales (FlashAttention 3's descales over a paged cache) scale
// every code a batch reads by that batch's scale, a shared page's codes included.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/tolerance.hpp"
#include "impl_check.hpp"

namespace attncheck {
namespace {

// B 2, Lk 17 in pages of 5 (the last page of each sequence part-used); pages 2 and 6 unused.
Problem paged_kv(DType q, DType codes, KvScales g) {
  Problem p;
  p.dtype = q, p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 3, p.Lk = 17, p.Dqk = 64, p.Dv = 32, p.want_lse = true;
  p.causal = true, p.alignment = Alignment::bottom_right, p.key_lengths = {17, 12};
  p.page_size = 5, p.num_pages = 10, p.block_table = {3, 7, 0, 9, 4, 1, 8, 5};
  p.kv_scales = g, p.kv_dtype = codes, p.kv_scale_dtype = is_q4(codes) ? DType::f16 : DType::f32;
  if (g == KvScales::block) p.kv_block = 32;
  return p;
}

Problem contiguous(Problem p) {
  p.page_size = p.num_pages = 0, p.block_table.clear();
  return p;
}

struct Format {
  DType codes;
  KvScales grain;
};
const Format kFormats[] = {{DType::i8, KvScales::tensor},  {DType::i8, KvScales::token},
                           {DType::e4m3, KvScales::block}, {DType::e5m2, KvScales::token},
                           {DType::q4_0, KvScales::block}, {DType::q4_1, KvScales::block},
                           {DType::e4m3, KvScales::head}};

TEST(KvPaged, APagedQuantizedCacheAttendsAsTheContiguousCacheItWasPagedFromBitwise) {
  for (const Format& f : kFormats) {
    const Problem p = paged_kv(DType::f32, f.codes, f.grain), flat = contiguous(p);
    const Inputs paged = gen::generate_inputs(p, gen::Distribution::normal, 4);
    const Inputs whole = gen::generate_inputs(flat, gen::Distribution::normal, 4);
    EXPECT_EQ(paged.k_scale->shape, kv_scale_shape(p, 1)) << p.name();
    const ExpectedAttention a = expected_attention(p, paged), b = expected_attention(flat, whole);
    EXPECT_EQ(a.out, b.out) << p.name();
    EXPECT_EQ(a.lse, b.lse) << p.name();
    if (f.grain == KvScales::tensor || f.grain == KvScales::head) continue;  // scales outside the pages
    // key 13 of batch 1 is slot 3 of page block_table[1 * 4 + 2] = 8; page 2 is never read
    const int64_t slot[4] = {8, 1, 3, 0}, key[4] = {1, 1, 13, 0}, unused[4] = {2, 0, 0, 0};
    EXPECT_EQ(paged.v_scale->get(slot), whole.v_scale->get(key)) << p.name();
    EXPECT_TRUE(std::isnan(paged.k_scale->get(unused))) << p.name();
  }
}

// The scales of pages x and y swapped, their codes left in place: what a kernel reads when it indexes the scales
// by another slot than the codes'.
Inputs scales_of_pages_swapped(const Problem& p, const Inputs& in, int64_t x, int64_t y) {
  Inputs w = in;
  for (std::optional<Tensor>* s : {&w.k_scale, &w.v_scale})
    for (int64_t h = 0; h < p.Hkv; ++h)
      for (int64_t t = 0; t < p.page_size; ++t)
        for (int64_t g = 0; g < (*s)->shape[3]; ++g) {
          const int64_t a[4] = {x, h, t, g}, b[4] = {y, h, t, g};
          const double u = (*s)->get(a);
          (*s)->set(a, (*s)->get(b)), (*s)->set(b, u);
        }
  return w;
}

// Per-(batch, head) scales of batches 0 and 1 swapped: a kernel scaling a shared page's codes by their writer's
// scale instead of the reading batch's reads this.
Inputs scales_of_batches_swapped(const Inputs& in) {
  Inputs w = in;
  for (std::optional<Tensor>* s : {&w.k_scale, &w.v_scale})
    for (int64_t h = 0; h < (*s)->shape[1]; ++h) {
      const int64_t a[4] = {0, h, 0, 0}, b[4] = {1, h, 0, 0};
      const double u = (*s)->get(a);
      (*s)->set(a, (*s)->get(b)), (*s)->set(b, u);
    }
  return w;
}

TEST(KvPaged, ImplementationsMatchTheReferenceAndScalesFromAnotherSlotAreCaught) {
  for (const char* name : {"reference", "cpu", "cpu-flash"})
    for (const Format& f : kFormats)
      for (DType q : {DType::f32, DType::bf16}) {
        Problem p = paged_kv(q, f.codes, f.grain);
        p.block_table[4] = 3;  // batch 1's first page is batch 0's: a shared page
        p.layout = q == DType::bf16 ? Layout::BSHD : Layout::BHSD;
        const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 6);
        Outputs out;
        ASSERT_TRUE(run_impl(*find_impl(name), p, in, out).ok) << name << " " << p.name();
        const Verdict v = judge(p, expected_attention(p, in), out);
        EXPECT_TRUE(v.pass) << name << " " << p.name() << ": " << v.worst().describe();
        if (f.grain == KvScales::tensor) continue;
        const Inputs wrong = f.grain == KvScales::head ? scales_of_batches_swapped(in)  // the shared page's reader
                                                       : scales_of_pages_swapped(p, in, 7, 0);  // batch 0's keys 5-14
        EXPECT_FALSE(judge(p, expected_attention(p, wrong), out).pass) << name << " " << p.name();
      }
}

TEST(KvPaged, OnlyReadSlotsAreCheckedAndOthersAreNotOffered) {
  const Problem p = paged_kv(DType::f32, DType::i8, KvScales::token);
  const Inputs good = gen::generate_inputs(p, gen::Distribution::normal, 1);
  EXPECT_EQ(input_message(p, good), "accepted");
  Inputs in = good;
  const int64_t unused[4] = {6, 1, 4, 0}, tail[4] = {9, 0, 2, 0}, read[4] = {9, 0, 1, 0};
  in.k_scale->set(unused, 0.0), in.k_scale->set(tail, 0.0);  // page 6 unused; keys 17.. of page 9 do not exist
  EXPECT_EQ(input_message(p, in), "accepted");
  in.k_scale->set(read, 0.0);  // key 16 of batch 0
  EXPECT_NE(input_message(p, in).find("k_scale[9,0,1,0]"), std::string::npos) << input_message(p, in);
  Problem head = p;
  head.kv_scales = KvScales::head;
  EXPECT_EQ(validation_message(head), "accepted");
  // The plugin ABI and the worker protocol carry scales per logical key: neither is offered a pool of scales.
  const Problem f32 = paged_kv(DType::f32, DType::e4m3, KvScales::token);
  const Support s = load_plugin(EXAMPLE_PLUGIN_PATH)->supports(f32);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("paged quantized KV cache"), std::string::npos) << s.reason;
  EXPECT_TRUE(load_plugin(EXAMPLE_PLUGIN_PATH)->supports(contiguous(f32)).ok);
  EXPECT_TRUE(find_impl("cpu-flash")->supports(f32).ok);
}

}  // namespace
}  // namespace attncheck
