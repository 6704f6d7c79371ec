// Block-sparse masks (block_mask.hpp): the derived block mask equals block masks worked out by hand (the grids
// below, one string per (b, h): query-block rows separated by '|', one letter per key block: F full, P partial,
// . empty), for causal (block sizes dividing and not dividing Lq/Lk), bottom-right causal, sliding window, key
// padding and document masks; the judge fails a partial block marked full, a missing block and a wrong tail block
// naming the block, notes an empty block listed; an inconsistent block mask is an input error naming the field;
// cpu-flash consumes a block mask handed at its tiles (same bits as without; a wrong one changes its output).
#include <gtest/gtest.h>

#include <stdexcept>

#include "attncheck/block_mask.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/problem.hpp"

namespace attncheck {
namespace {

Problem square(int64_t L) {
  Problem p;
  p.Lq = p.Lk = L, p.Dqk = p.Dv = 4;
  return p;
}

Inputs inputs(const Problem& p) { return Inputs{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}}; }

// The grid of (b, h) of a block mask, in the notation above.
std::string grid(const BlockMask& m, const Problem& p, int64_t b, int64_t h) {
  const std::vector<BlockKind> k = block_kinds(m, p);
  const int64_t nq = blocks_of(p.Lq, m.q_block), nk = blocks_of(p.Lk, m.kv_block);
  std::string s;
  for (int64_t q = 0; q < nq; ++q) {
    if (q) s += '|';
    for (int64_t c = 0; c < nk; ++c) {
      const BlockKind x = k[static_cast<size_t>(((b * p.Hq + h) * nq + q) * nk + c)];
      s += x == BlockKind::full ? 'F' : x == BlockKind::partial ? 'P' : '.';
    }
  }
  return s;
}

std::string derived(const Problem& p, int64_t qb, int64_t kb, int64_t b = 0, int64_t h = 0) {
  const Inputs in = inputs(p);
  return grid(derive_block_mask(p, in, qb, kb), p, b, h);
}

TEST(BlockMask, CausalEqualsTheHandWorkedGrid) {
  Problem p = square(8);
  p.causal = true;
  EXPECT_EQ(derived(p, 4, 4), "P.|FP");
  // Lq = Lk = 10 in blocks of 4: the tail blocks (rows 8-9, keys 8-9) are padded, so never full.
  p = square(10);
  p.causal = true;
  EXPECT_EQ(derived(p, 4, 4), "P..|FP.|PPP");
}

TEST(BlockMask, BottomRightCausalWithBlocksThatDoNotDivide) {
  Problem p = square(1);
  p.Lq = 3, p.Lk = 10, p.causal = true, p.alignment = Alignment::bottom_right;  // row i sees j <= i + 7
  EXPECT_EQ(derived(p, 2, 4), "FFP|PPP");
}

TEST(BlockMask, SlidingWindowEqualsTheHandWorkedGrid) {
  Problem p = square(8);
  p.window_left = p.window_right = 2;  // row i sees [i - 2, i + 2]
  EXPECT_EQ(derived(p, 2, 2), "FP..|PFP.|.PFP|..PF");
  p = square(12);
  p.causal = true, p.window_left = 3;  // [i - 3, i]
  EXPECT_EQ(derived(p, 4, 4), "P..|PP.|.PP");
}

TEST(BlockMask, KeyPaddingAndDocumentMasks) {
  Problem p = square(8);
  p.Lq = 4, p.key_lengths = {6};
  EXPECT_EQ(derived(p, 4, 4), "FP");
  // Two packed batches of documents over Lk = 10 in blocks of 4 (the last block a tail).
  p = square(10);
  p.B = 2;
  p.doc_ids = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2,  //
               0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(derived(p, 4, 4, 0), "F..|.F.|..P");
  EXPECT_EQ(derived(p, 4, 4, 1), "PPP|PFP|PPP");
  p.causal = true;
  EXPECT_EQ(derived(p, 4, 4, 0), "P..|.P.|..P");
}

TEST(BlockMask, PerHeadBooleanMaskAndIndicesAscending) {
  Problem p = square(4);
  p.Hq = p.Hkv = 2, p.mask_shape = std::array<int64_t, 4>{1, 2, 4, 4};
  Inputs in = inputs(p);
  in.mask = Tensor(DType::u8, {1, 2, 4, 4});
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      in.mask->data<uint8_t>()[i * 4 + j] = 1;                // head 0 sees everything
      in.mask->data<uint8_t>()[16 + i * 4 + j] = j % 2 == 0;  // head 1 even keys
    }
  const BlockMask m = derive_block_mask(p, in, 2, 1);
  EXPECT_EQ(grid(m, p, 0, 0), "FFFF|FFFF");
  EXPECT_EQ(grid(m, p, 0, 1), "F.F.|F.F.");
  ASSERT_EQ(m.full_kv_num_blocks[0], 4);
  EXPECT_EQ(m.full_kv_indices[0], 0);
  EXPECT_EQ(m.full_kv_indices[3], 3);
  EXPECT_EQ(m.full_kv_indices[size_t(2 * m.slots + 1)], 2);  // head 1, q-block 0: blocks 0 and 2
}

// The first finding's text, "" without one.
std::string first(const std::vector<BlockFinding>& f) { return f.empty() ? "" : f.front().describe(); }

TEST(BlockMaskJudge, ExactPassesAndBroadcastHeadsPass) {
  Problem p = square(10);
  p.causal = true, p.Hq = p.Hkv = 2;
  const Inputs in = inputs(p);
  const BlockMaskVerdict v = judge_block_mask(p, in, derive_block_mask(p, in, 4, 4));
  EXPECT_TRUE(v.pass());
  EXPECT_TRUE(v.notes.empty());
  // The mask does not depend on the head: one head's rows for all (H = 1) is the same block mask.
  Problem one = p;
  one.Hq = one.Hkv = 1;
  const BlockMask m1 = derive_block_mask(one, inputs(one), 4, 4);
  EXPECT_TRUE(judge_block_mask(p, in, m1).pass());
}

TEST(BlockMaskJudge, PartialMarkedFullAndMissingFailNamingTheBlock) {
  Problem p = square(8);
  p.causal = true;
  const Inputs in = inputs(p);
  BlockMask m = derive_block_mask(p, in, 4, 4);  // "P.|FP": q-block 1 lists full 0, partial 1
  BlockMask wrong = m;
  wrong.kv_num_blocks[1] = 0, wrong.full_kv_num_blocks[1] = 2, wrong.full_kv_indices[size_t(m.slots + 1)] = 1;
  BlockMaskVerdict v = judge_block_mask(p, in, wrong);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_EQ(first(v.failures),
            "block (b=0, h=0, q-block 1, kv-block 1): partial block marked full: 10 of its 16 scores visible, the "
            "masked ones would get weight (rows 4..7, keys 4..7)");
  wrong = m;
  wrong.full_kv_num_blocks[1] = 0;  // the full block (1, 0) dropped
  v = judge_block_mask(p, in, wrong);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_EQ(first(v.failures),
            "block (b=0, h=0, q-block 1, kv-block 0): full block missing: 16 of its 16 scores visible, a kernel "
            "would skip them (rows 4..7, keys 0..3)");
}

TEST(BlockMaskJudge, AWrongTailBlockFails) {
  Problem p = square(10);
  p.causal = true;
  const Inputs in = inputs(p);
  const BlockMask m = derive_block_mask(p, in, 4, 4);  // "P..|FP.|PPP"
  // Every real score of (2, 0) is visible; a block mask that ignores the padding rows calls it full.
  BlockMask wrong = m;
  const size_t r = 2;
  wrong.kv_num_blocks[r] = 2, wrong.kv_indices[r * 3] = 1, wrong.kv_indices[r * 3 + 1] = 2;
  wrong.full_kv_num_blocks[r] = 1, wrong.full_kv_indices[r * 3] = 0;
  BlockMaskVerdict v = judge_block_mask(p, in, wrong);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_EQ(first(v.failures),
            "block (b=0, h=0, q-block 2, kv-block 0): partial block marked full: 8 of its 16 scores visible, the "
            "masked ones would get weight (rows 8..9, keys 0..3; the tail block: 2 padding rows beyond Lq = 10, "
            "masked by convention)");
  // floor(Lk / kv_block) key blocks: the tail key block is never listed.
  wrong = m;
  wrong.kv_num_blocks[r] = 2;
  v = judge_block_mask(p, in, wrong);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_NE(first(v.failures).find("(b=0, h=0, q-block 2, kv-block 2): partial block missing"), std::string::npos);
  EXPECT_NE(first(v.failures).find("2 padding keys beyond Lk = 10"), std::string::npos);
  // floor(Lq / q_block) query blocks: the tail rows list nothing.
  wrong = m;
  wrong.q_blocks = 2;
  for (auto* f : {&wrong.kv_num_blocks, &wrong.full_kv_num_blocks}) f->resize(2);
  for (auto* f : {&wrong.kv_indices, &wrong.full_kv_indices}) f->resize(6);
  v = judge_block_mask(p, in, wrong);
  EXPECT_EQ(v.failures.size(), 3u);
  EXPECT_NE(first(v.failures).find("q-block 2, kv-block 0): partial block missing"), std::string::npos);
}

TEST(BlockMaskJudge, AnEmptyOrFullBlockListedPartialIsANote) {
  Problem p = square(8);
  p.causal = true;
  const Inputs in = inputs(p);
  BlockMask m = derive_block_mask(p, in, 4, 4);                                                   // "P.|FP"
  m.kv_num_blocks[0] = 2, m.kv_indices[1] = 1;                                                    // (0, 1) is empty
  m.full_kv_num_blocks[1] = 0, m.kv_num_blocks[1] = 2, m.kv_indices[2] = 1, m.kv_indices[3] = 0;  // (1, 0) full
  const BlockMaskVerdict v = judge_block_mask(p, in, m);
  EXPECT_TRUE(v.pass());
  ASSERT_EQ(v.notes.size(), 2u);
  EXPECT_NE(v.notes[0].describe().find("kv-block 1): empty block listed as partial"), std::string::npos);
  EXPECT_NE(v.notes[1].describe().find("kv-block 0): full block listed as partial"), std::string::npos);
}

void expect_input_error(const BlockMask& m, const Problem& p, const std::string& message) {
  try {
    validate_block_mask(m, p);
    ADD_FAILURE() << "accepted; expected: " << message;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(e.what(), message);
  }
}

TEST(BlockMaskValidate, InconsistentBlockMasksNameTheFieldAndValues) {
  Problem p = square(10);
  p.causal = true;
  const Inputs in = inputs(p);
  const BlockMask m = derive_block_mask(p, in, 4, 4);  // "P..|FP.|PPP", 3 slots
  EXPECT_NO_THROW(validate_block_mask(m, p));
  BlockMask w = m;
  w.kv_num_blocks[2] = 4;
  expect_input_error(w, p, "block mask: kv_num_blocks[0,0,2] = 4 is outside [0, 3] (the index slots of kv_indices)");
  w = m;
  w.kv_indices[0] = 3;
  expect_input_error(w, p,
                     "block mask: kv_indices[0,0,0,0] = 3 is outside [0, 3) (ceil(Lk = 10 / kv_block = 4) key blocks)");
  w = m;
  w.kv_indices[7] = 0;  // row 2 lists 0, 0, 2
  expect_input_error(w, p, "block mask: kv_indices[0,0,2,1] = 0 repeats slot 0 of the same row");
  w = m;
  w.full_kv_num_blocks[2] = 1, w.full_kv_indices[6] = 1;
  expect_input_error(w, p,
                     "block mask: key block 1 of row [0,0,2] is both partial (kv_indices) and full "
                     "(full_kv_indices)");
  w = m;
  w.full_kv_indices.pop_back();
  expect_input_error(w, p, "block mask: full_kv_indices: 8 values, expected B*H*q_blocks*slots = 9");
  w = m;
  w.B = 2;
  expect_input_error(w, p, "block mask: kv_num_blocks: batch dimension 2 is neither 1 nor B = 1");
  w = m;
  w.q_blocks = 4;
  expect_input_error(w, p, "block mask: kv_num_blocks: 4 query blocks, more than ceil(Lq = 10 / q_block = 4) = 3");
  w = m;
  w.kv_block = 0;
  expect_input_error(w, p, "block mask: kv_block must be at least 1, got 0");
  EXPECT_THROW(judge_block_mask(p, in, w), std::invalid_argument);
}

// cpu-flash's tiles for head dims up to 64 (kFlashBlockQSmallD x kFlashBlockKSmallD, impls/cpu/cpu_impls.hpp).
constexpr int64_t kTileQ = 48, kTileK = 256;

// Documents of 300 tokens over 600 (tiles of rows 0..47 and keys 0..255 are full, some are empty, the key tail
// 512..599 is partial), two heads, random inputs; masked keys poisoned with NaN are never read.
struct FlashCase {
  Problem p;
  Inputs in;
};
FlashCase flash_case(bool causal) {
  FlashCase c;
  Problem& p = c.p;
  p.Hq = p.Hkv = 2, p.Lq = p.Lk = 600, p.Dqk = p.Dv = 16, p.causal = causal, p.want_lse = true;
  for (int64_t j = 0; j < p.Lk; ++j) p.doc_ids.push_back(j / 300);
  c.in = inputs(p);
  uint64_t state = 12345;
  for (Tensor* t : {&c.in.q, &c.in.k, &c.in.v})
    for (int64_t n = 0; n < t->numel(); ++n) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      t->set_offset(n, static_cast<double>(state >> 11) * 0x1.0p-52 - 1.0);
    }
  return c;
}

Outputs run_flash(const FlashCase& c, const BlockMask* m) {
  const BlockMaskScope scope(m);
  Outputs out = make_outputs(c.p);
  EXPECT_TRUE(run_impl(*find_impl("cpu-flash"), c.p, c.in, out).ok);
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.bytes == b.bytes; }

TEST(BlockMaskFlash, SameBitsWithTheBlockMaskHanded) {
  for (bool causal : {false, true}) {
    const FlashCase c = flash_case(causal);
    const BlockMask m = derive_block_mask(c.p, c.in, kTileQ, kTileK);
    EXPECT_EQ(grid(m, c.p, 0, 1).substr(0, 3), causal ? "P.." : "FP.");  // full tiles exist (and are used)
    const Outputs a = run_flash(c, nullptr), b = run_flash(c, &m);
    EXPECT_TRUE(same_bits(a.out, b.out)) << "causal " << causal;
    EXPECT_TRUE(same_bits(*a.lse, *b.lse)) << "causal " << causal;
  }
}

TEST(BlockMaskFlash, AWrongBlockMaskAtItsTilesChangesItsOutput) {
  const FlashCase c = flash_case(false);
  const BlockMask exact = derive_block_mask(c.p, c.in, kTileQ, kTileK);
  const Outputs base = run_flash(c, nullptr);
  // Row (0, 0, q-block 6) = rows 288..335 straddle the documents: key block 0 is partial there. Marked full, the
  // other document's keys get weight.
  BlockMask wrong = exact;
  const size_t r = 6, slots = static_cast<size_t>(exact.slots);
  ASSERT_EQ(grid(exact, c.p, 0, 0).substr(6 * 4, 3), "PPP");
  wrong.kv_num_blocks[r] = 2, wrong.kv_indices[r * slots] = 1, wrong.kv_indices[r * slots + 1] = 2;
  wrong.full_kv_num_blocks[r] = 1, wrong.full_kv_indices[r * slots] = 0;
  EXPECT_FALSE(same_bits(base.out, run_flash(c, &wrong).out));
  // A non-empty block left out: its keys are skipped.
  wrong = exact;
  wrong.full_kv_num_blocks[0] = 0;  // (0, 0, q-block 0): key block 0 full
  EXPECT_FALSE(same_bits(base.out, run_flash(c, &wrong).out));
  // At other block sizes the block mask is not the kernel's: not consumed, same bits even when wrong.
  BlockMask other = derive_block_mask(c.p, c.in, 64, 64);
  other.kv_num_blocks.assign(other.kv_num_blocks.size(), 0);
  other.full_kv_num_blocks.assign(other.full_kv_num_blocks.size(), 0);
  EXPECT_TRUE(same_bits(base.out, run_flash(c, &other).out));
}

}  // namespace
}  // namespace attncheck
