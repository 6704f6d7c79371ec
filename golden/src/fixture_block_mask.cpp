// Fixture block masks (fixture_block_mask.hpp): int64 datasets, one per BlockMask tensor, row-major.
#include "fixture_block_mask.hpp"

#include <string>
#include <vector>

#include "untrusted.hpp"

namespace attncheck::fixture_detail {

namespace {
constexpr const char* kBlockMaskGroup = "/expected/block_mask";

struct BlockMaskMember {
  const char* name;
  std::vector<int64_t> BlockMask::*values;
  bool slots;  // [B, H, q_blocks, slots]; else [B, H, q_blocks]
};
constexpr BlockMaskMember kBlockMaskMembers[] = {{"kv_num_blocks", &BlockMask::kv_num_blocks, false},
                                                 {"kv_indices", &BlockMask::kv_indices, true},
                                                 {"full_kv_num_blocks", &BlockMask::full_kv_num_blocks, false},
                                                 {"full_kv_indices", &BlockMask::full_kv_indices, true}};

std::vector<int64_t> block_mask_dims(const BlockMask& m, bool slots) {
  std::vector<int64_t> d = {m.B, m.H, m.q_blocks};
  if (slots) d.push_back(m.slots);
  return d;
}
}  // namespace

void write_block_mask(hid_t root, hid_t expected, const Fixture& f) {
  if (!f.block_mask) return;
  const BlockMask& m = *f.block_mask;
  h5::write_attr(root, "block_mask", std::vector<int64_t>{m.q_block, m.kv_block});
  h5::Id g = h5::create_group(expected, "block_mask");
  for (const BlockMaskMember& x : kBlockMaskMembers)
    h5::write_dataset(g, x.name, H5T_STD_I64LE, block_mask_dims(m, x.slots), (m.*x.values).data());
}

void read_block_mask(const h5::Reader& r, hid_t file, Fixture& f) {
  h5::Id root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose);
  const bool declared = r.has_attr(root, "block_mask"), present = r.has_object(file, kBlockMaskGroup);
  if (!declared && present) r.fail(kBlockMaskGroup, "present but not declared by attribute block_mask");
  if (!declared) return;
  if (!present) r.fail(kBlockMaskGroup, "missing group (declared by attribute block_mask)");
  const std::vector<int64_t> size = r.attr_i64s(root, "/", "block_mask");
  if (size.size() != 2 || size[0] < 1 || size[1] < 1)
    r.fail("block_mask", "must be (q_block, kv_block), two block sizes of at least 1");
  const Problem& p = f.problem;
  BlockMask m;
  m.q_block = size[0], m.kv_block = size[1];
  m.B = p.B, m.H = p.Hq, m.q_blocks = blocks_of(p.Lq, m.q_block), m.slots = blocks_of(p.Lk, m.kv_block);
  for (const BlockMaskMember& x : kBlockMaskMembers) {
    const std::string where = std::string(kBlockMaskGroup) + "/" + x.name;
    h5::Id d = r.open_dataset(file, where);
    const std::vector<int64_t> want = block_mask_dims(m, x.slots);
    r.expect_extents(d, where, want);
    std::vector<int64_t>& v = m.*x.values;
    v.resize(static_cast<size_t>(want[0] * want[1] * want[2] * (x.slots ? want[3] : 1)));
    r.read_i64(d, where, v.data());
  }
  try {
    validate_block_mask(m, p);
  } catch (const std::invalid_argument& e) {
    r.fail(kBlockMaskGroup, e.what());
  }
  if (!h5::in_reading_child()) {  // computed from values already read: the reading child leaves it to the parent
    const BlockMask exact = derive_block_mask(p, f.inputs, m.q_block, m.kv_block);
    for (const BlockMaskMember& x : kBlockMaskMembers)
      if (m.*x.values != exact.*x.values)
        r.fail(std::string(kBlockMaskGroup) + "/" + x.name,
               "is not the exact block mask of the problem and inputs at " + std::to_string(m.q_block) + " x " +
                   std::to_string(m.kv_block) +
                   " blocks (derive_block_mask; `attncheck block-mask --expected` prints "
                   "it)");
  }
  f.block_mask = std::move(m);
}

}  // namespace attncheck::fixture_detail
