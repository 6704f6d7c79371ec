// The block-mask part of the fixture writer and reader (golden/SCHEMA.md "Block mask"): FlexAttention's four tensors
// under /expected/block_mask, present iff the root attribute `block_mask` (q_block, kv_block) declares them.
#pragma once

#include <hdf5.h>

#include "attncheck/fixture.hpp"
#include "h5.hpp"

namespace attncheck::fixture_detail {

void write_block_mask(hid_t root, hid_t expected, const Fixture& f);
// Reads the declared block mask into f.block_mask and refuses one that is not validate_block_mask-consistent or,
// outside the reading child, not the exact block mask of f's problem and inputs (derive_block_mask).
void read_block_mask(const h5::Reader& r, hid_t file, Fixture& f);

}  // namespace attncheck::fixture_detail
