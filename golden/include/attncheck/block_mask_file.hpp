// Block masks as files (block_mask.hpp; docs/block-mask.md "Files"): FlexAttention's four tensors as members of an
// .npz (np.savez) or datasets of an HDF5 file (h5py): kv_num_blocks [B, H, q_blocks], kv_indices [B, H, q_blocks,
// slots], optionally full_kv_num_blocks and full_kv_indices of the same shapes (absent: no full blocks) and
// block_size [2] = (q_block, kv_block). From torch: np.savez(path, kv_num_blocks=bm.kv_num_blocks.numpy(), ...,
// block_size=np.array(bm.BLOCK_SIZE)).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "attncheck/block_mask.hpp"

namespace attncheck {

// Reads the tensors (std::invalid_argument "<path>: <member>: <what>" for a missing, non-integer or misshapen one)
// and the block sizes: block_size when present, else `sizes` (both must agree when both are given), else 128 x 128.
// Consistency with a problem is validate_block_mask's.
BlockMask read_block_mask(const std::string& path, std::optional<std::pair<int64_t, int64_t>> sizes = std::nullopt);

// Writes m as an .npz (int32 members, stored; block_size included), durably.
void write_block_mask_npz(const std::string& path, const BlockMask& m);

}  // namespace attncheck
