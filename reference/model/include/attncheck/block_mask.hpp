// Block-sparse masks (FlexAttention's BlockMask): the dense mask of a problem (every mask composed: causal, window,
// key padding, packed sequences, the boolean mask and every mask modification) summarised per tile. The query axis
// is cut into blocks of q_block rows and the key axis into blocks of kv_block keys; per (batch, query head, query
// block) a block mask lists the key blocks in which some score is visible, split into full blocks (every score
// visible: a kernel applies no mask there) and partial blocks (some visible: the kernel applies the mask); a key
// block in neither list is empty (a kernel skips it). Tail blocks (Lq or Lk not a multiple of the block size) are
// padded with masked positions, as torch's create_block_mask pads, so a tail block is never full. Convention and
// choices: docs/block-mask.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/mods.hpp"
#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace model {

// The dense mask row by row: the conjunction the reference applies (reference.cpp reads it from here).
class DenseMask {
 public:
  DenseMask(const Problem& p, const Inputs& in);
  // vis[j] = 1 when query i of head h in batch b sees key j, else 0 (Lk entries).
  void row(int64_t b, int64_t h, int64_t i, char* vis) const;

 private:
  const Problem& p_;
  const Inputs& in_;
  ModSet mods_;
};

struct BlockMask {
  int64_t q_block = 128, kv_block = 128;
  // Counts are [B, H, q_blocks], indices [B, H, q_blocks, slots] (row-major); B or H of 1 stands for every batch or
  // head (FlexAttention's broadcast). Index slots past a row's count are unused.
  int64_t B = 0, H = 0, q_blocks = 0, slots = 0;
  std::vector<int64_t> kv_num_blocks, kv_indices;            // partial blocks
  std::vector<int64_t> full_kv_num_blocks, full_kv_indices;  // full blocks
};

enum class BlockKind : uint8_t { empty, partial, full };
const char* to_string(BlockKind k);

int64_t blocks_of(int64_t length, int64_t block);  // ceil(length / block)

// The exact block mask of p at the given block sizes (both >= 1): [B, Hq, ceil(Lq/q_block)] rows, slots =
// ceil(Lk/kv_block), indices ascending. Throws std::invalid_argument naming a block size below 1.
BlockMask derive_block_mask(const Problem& p, const Inputs& in, int64_t q_block = 128, int64_t kv_block = 128);

// An input error (std::invalid_argument naming the field and the values) when m is inconsistent in itself or with
// p: block sizes below 1, B or H neither 1 nor the problem's, more query blocks than ceil(Lq/q_block), array sizes
// that disagree with the shape, a count below 0 or beyond the slots, an index outside [0, ceil(Lk/kv_block)), an
// index listed twice in one row, a block both full and partial. Fewer query blocks than the problem has is
// consistent: the missing rows list nothing (the judge reports their blocks missing).
void validate_block_mask(const BlockMask& m, const Problem& p);

// The kind of every block of a validated m, [B, Hq, ceil(Lq/q_block), ceil(Lk/kv_block)] for p's shapes
// (broadcast expanded, missing query-block rows empty).
std::vector<BlockKind> block_kinds(const BlockMask& m, const Problem& p);

// A candidate's block mask judged against the exact one at its block sizes. Failures: a block marked full that is
// partial or empty (its masked scores would get weight), a non-empty block listed nowhere (its visible scores would
// be skipped), each naming the block and saying when it is a tail block. Notes (not failures): an empty block
// listed partial (wasted work), a full block listed partial (the mask is applied where it need not be).
struct BlockFinding {
  int64_t b, h, q_block, kv_block;
  std::string what;
  std::string describe() const;  // "block (b=0, h=1, q-block 2, kv-block 3): <what>"
};
struct BlockMaskVerdict {
  std::vector<BlockFinding> failures, notes;
  bool pass() const { return failures.empty(); }
};
BlockMaskVerdict judge_block_mask(const Problem& p, const Inputs& in, const BlockMask& candidate);

// The block mask handed to the implementation runs on the calling thread (nullptr outside a BlockMaskScope), as
// FlexAttention's caller builds one with create_block_mask and passes it to every call. An implementation that
// consumes block masks reads it when it starts a run (cpu-flash: docs/block-mask.md "Consumers").
const BlockMask* current_block_mask();

class BlockMaskScope {
 public:
  explicit BlockMaskScope(const BlockMask* m);
  ~BlockMaskScope();
  BlockMaskScope(const BlockMaskScope&) = delete;
  BlockMaskScope& operator=(const BlockMaskScope&) = delete;

 private:
  const BlockMask* saved_;
};

}  // namespace model
}  // namespace attncheck
