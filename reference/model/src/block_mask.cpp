// Block-sparse masks (block_mask.hpp): the dense mask row by row, the exact block mask derived from it, the
// consistency rules of a given block mask and the judge of a candidate's. Convention: docs/block-mask.md.
#include "attncheck/block_mask.hpp"

#include <algorithm>
#include <sstream>

#include "detail.hpp"

namespace attncheck {
inline namespace model {
namespace {

using detail::fail;

std::string at3(int64_t b, int64_t h, int64_t q) {
  std::ostringstream s;  // (not "[" + std::to_string(...): GCC 12 warns falsely on inserting into a temporary)
  s << "[" << b << "," << h << "," << q << "]";
  return s.str();
}

// Visible scores per block, [B, Hq, nq, nk], of the dense mask.
std::vector<int64_t> visible_counts(const Problem& p, const Inputs& in, int64_t qb, int64_t kb) {
  const int64_t nq = blocks_of(p.Lq, qb), nk = blocks_of(p.Lk, kb);
  std::vector<int64_t> counts(static_cast<size_t>(p.B * p.Hq * nq * nk), 0);
  const DenseMask dm(p, in);
  std::vector<char> vis(static_cast<size_t>(p.Lk));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        dm.row(b, h, i, vis.data());
        int64_t* c = &counts[static_cast<size_t>(((b * p.Hq + h) * nq + i / qb) * nk)];
        for (int64_t j = 0; j < p.Lk; ++j) c[j / kb] += vis[static_cast<size_t>(j)];
      }
  return counts;
}

// Rows, keys and padding of block (q, k), for messages.
std::string region(const Problem& p, int64_t qb, int64_t kb, int64_t q, int64_t k) {
  const int64_t r0 = q * qb, r1 = std::min(p.Lq, r0 + qb), k0 = k * kb, k1 = std::min(p.Lk, k0 + kb);
  std::ostringstream s;
  s << "rows " << r0 << ".." << r1 - 1 << ", keys " << k0 << ".." << k1 - 1;
  if (r1 - r0 < qb || k1 - k0 < kb) {
    s << "; the tail block:";
    if (k1 - k0 < kb) s << " " << kb - (k1 - k0) << " padding keys beyond Lk = " << p.Lk;
    if (k1 - k0 < kb && r1 - r0 < qb) s << " and";
    if (r1 - r0 < qb) s << " " << qb - (r1 - r0) << " padding rows beyond Lq = " << p.Lq;
    s << ", masked by convention";
  }
  return s.str();
}

}  // namespace

const char* to_string(BlockKind k) {
  switch (k) {
    case BlockKind::empty: return "empty";
    case BlockKind::partial: return "partial";
    case BlockKind::full: return "full";
  }
  return "?";
}

int64_t blocks_of(int64_t length, int64_t block) { return (length + block - 1) / block; }

DenseMask::DenseMask(const Problem& p, const Inputs& in) : p_(p), in_(in), mods_(p) {}

void DenseMask::row(int64_t b, int64_t h, int64_t i, char* vis) const {
  const Problem::RowKeys rk = p_.row_keys(b, i);
  const int64_t diag = rk.diag;
  for (int64_t j = 0; j < p_.Lk; ++j) {
    bool v = true;
    if (p_.causal && j > diag) v = false;                               // causal: j <= i + offset
    if (j >= rk.valid_end || j < rk.begin || j >= rk.end) v = false;    // key padding; another packed sequence
    if (p_.window_left >= 0 && j < diag - p_.window_left) v = false;    // sliding window, left edge
    if (p_.window_right >= 0 && j > diag + p_.window_right) v = false;  // sliding window, right edge
    if (v && in_.mask && in_.mask->get_offset(broadcast_offset(*in_.mask, b, h, i, j)) == 0) v = false;
    if (v && mods_.has_mask() && !mods_.visible(ModAt{b, h, i, diag, j})) v = false;  // mask modifications
    vis[j] = v ? 1 : 0;
  }
}

BlockMask derive_block_mask(const Problem& p, const Inputs& in, int64_t q_block, int64_t kv_block) {
  if (q_block < 1) fail("block mask: q_block must be at least 1, got " + std::to_string(q_block));
  if (kv_block < 1) fail("block mask: kv_block must be at least 1, got " + std::to_string(kv_block));
  const int64_t nq = blocks_of(p.Lq, q_block), nk = blocks_of(p.Lk, kv_block), rows = p.B * p.Hq * nq;
  const std::vector<int64_t> counts = visible_counts(p, in, q_block, kv_block);
  BlockMask m{q_block, kv_block, p.B, p.Hq, nq, nk, {}, {}, {}, {}};
  m.kv_num_blocks.assign(static_cast<size_t>(rows), 0);
  m.full_kv_num_blocks.assign(static_cast<size_t>(rows), 0);
  m.kv_indices.assign(static_cast<size_t>(rows * nk), 0);
  m.full_kv_indices.assign(static_cast<size_t>(rows * nk), 0);
  const int64_t area = q_block * kv_block;  // padded: a tail block's padding is masked, so it is never full
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < nk; ++k) {
      const int64_t c = counts[static_cast<size_t>(r * nk + k)];
      if (c == 0) continue;
      auto& n = c == area ? m.full_kv_num_blocks[size_t(r)] : m.kv_num_blocks[size_t(r)];
      auto& idx = c == area ? m.full_kv_indices : m.kv_indices;
      idx[static_cast<size_t>(r * nk + n++)] = k;
    }
  return m;
}

void validate_block_mask(const BlockMask& m, const Problem& p) {
  const auto str = [](int64_t x) { return std::to_string(x); };
  if (m.q_block < 1) fail("block mask: q_block must be at least 1, got " + str(m.q_block));
  if (m.kv_block < 1) fail("block mask: kv_block must be at least 1, got " + str(m.kv_block));
  const int64_t nq = blocks_of(p.Lq, m.q_block), nk = blocks_of(p.Lk, m.kv_block);
  if (m.B != 1 && m.B != p.B)
    fail("block mask: kv_num_blocks: batch dimension " + str(m.B) + " is neither 1 nor B = " + str(p.B));
  if (m.H != 1 && m.H != p.Hq)
    fail("block mask: kv_num_blocks: head dimension " + str(m.H) + " is neither 1 nor Hq = " + str(p.Hq));
  if (m.q_blocks < 0 || m.q_blocks > nq)
    fail("block mask: kv_num_blocks: " + str(m.q_blocks) + " query blocks, more than ceil(Lq = " + str(p.Lq) +
         " / q_block = " + str(m.q_block) + ") = " + str(nq));
  if (m.slots < 0) fail("block mask: kv_indices: " + str(m.slots) + " index slots");
  const int64_t rows = m.B * m.H * m.q_blocks;
  const auto sized = [&](const char* field, const std::vector<int64_t>& v, int64_t want, const char* shape) {
    if (static_cast<int64_t>(v.size()) != want)
      fail(std::string("block mask: ") + field + ": " + str(static_cast<int64_t>(v.size())) + " values, expected " +
           shape + " = " + str(want));
  };
  sized("kv_num_blocks", m.kv_num_blocks, rows, "B*H*q_blocks");
  sized("full_kv_num_blocks", m.full_kv_num_blocks, rows, "B*H*q_blocks");
  sized("kv_indices", m.kv_indices, rows * m.slots, "B*H*q_blocks*slots");
  sized("full_kv_indices", m.full_kv_indices, rows * m.slots, "B*H*q_blocks*slots");
  std::vector<int> seen(static_cast<size_t>(nk));  // 0 none, 1 partial, 2 full; per row
  std::vector<int64_t> slot_of(static_cast<size_t>(nk));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / (m.H * m.q_blocks), h = r / m.q_blocks % m.H, q = r % m.q_blocks;
    std::fill(seen.begin(), seen.end(), 0);
    for (int kind = 1; kind <= 2; ++kind) {
      const std::string cf = kind == 1 ? "kv_num_blocks" : "full_kv_num_blocks";
      const std::string xf = kind == 1 ? "kv_indices" : "full_kv_indices";
      const int64_t n = (kind == 1 ? m.kv_num_blocks : m.full_kv_num_blocks)[static_cast<size_t>(r)];
      if (n < 0 || n > m.slots)
        fail("block mask: " + cf + at3(b, h, q) + " = " + str(n) + " is outside [0, " + str(m.slots) +
             "] (the index slots of " + xf + ")");
      for (int64_t s = 0; s < n; ++s) {
        const int64_t k = (kind == 1 ? m.kv_indices : m.full_kv_indices)[static_cast<size_t>(r * m.slots + s)];
        const std::string at = xf + "[" + str(b) + "," + str(h) + "," + str(q) + "," + str(s) + "]";
        if (k < 0 || k >= nk)
          fail("block mask: " + at + " = " + str(k) + " is outside [0, " + str(nk) + ") (ceil(Lk = " + str(p.Lk) +
               " / kv_block = " + str(m.kv_block) + ") key blocks)");
        int& was = seen[static_cast<size_t>(k)];
        if (was == kind)
          fail("block mask: " + at + " = " + str(k) + " repeats slot " + str(slot_of[size_t(k)]) + " of the same row");
        if (was != 0)
          fail("block mask: key block " + str(k) + " of row " + at3(b, h, q) +
               " is both partial (kv_indices) and full (full_kv_indices)");
        was = kind;
        slot_of[static_cast<size_t>(k)] = s;
      }
    }
  }
}

std::vector<BlockKind> block_kinds(const BlockMask& m, const Problem& p) {
  const int64_t nq = blocks_of(p.Lq, m.q_block), nk = blocks_of(p.Lk, m.kv_block);
  std::vector<BlockKind> out(static_cast<size_t>(p.B * p.Hq * nq * nk), BlockKind::empty);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t q = 0; q < m.q_blocks; ++q) {
        const int64_t r = ((m.B == 1 ? 0 : b) * m.H + (m.H == 1 ? 0 : h)) * m.q_blocks + q;
        BlockKind* row = &out[static_cast<size_t>(((b * p.Hq + h) * nq + q) * nk)];
        for (int64_t s = 0; s < m.kv_num_blocks[size_t(r)]; ++s)
          row[m.kv_indices[static_cast<size_t>(r * m.slots + s)]] = BlockKind::partial;
        for (int64_t s = 0; s < m.full_kv_num_blocks[size_t(r)]; ++s)
          row[m.full_kv_indices[static_cast<size_t>(r * m.slots + s)]] = BlockKind::full;
      }
  return out;
}

std::string BlockFinding::describe() const {
  std::ostringstream s;
  s << "block (b=" << b << ", h=" << h << ", q-block " << q_block << ", kv-block " << kv_block << "): " << what;
  return s.str();
}

BlockMaskVerdict judge_block_mask(const Problem& p, const Inputs& in, const BlockMask& candidate) {
  validate_block_mask(candidate, p);
  const int64_t qb = candidate.q_block, kb = candidate.kv_block;
  const int64_t nq = blocks_of(p.Lq, qb), nk = blocks_of(p.Lk, kb), area = qb * kb;
  const std::vector<int64_t> counts = visible_counts(p, in, qb, kb);
  const std::vector<BlockKind> got = block_kinds(candidate, p);
  BlockMaskVerdict v;
  for (size_t x = 0; x < counts.size(); ++x) {
    const int64_t c = counts[x];
    const BlockKind want = c == 0 ? BlockKind::empty : c == area ? BlockKind::full : BlockKind::partial;
    const BlockKind is = got[x];
    if (is == want) continue;
    const int64_t k = static_cast<int64_t>(x) % nk, q = static_cast<int64_t>(x) / nk % nq;
    const int64_t h = static_cast<int64_t>(x) / (nk * nq) % p.Hq, b = static_cast<int64_t>(x) / (nk * nq * p.Hq);
    const std::string where = std::string(" (") + region(p, qb, kb, q, k) + ")";
    const std::string seen = std::to_string(c) + " of its " + std::to_string(area) + " scores visible";
    if (is == BlockKind::full)
      v.failures.push_back({b, h, q, k,
                            std::string(to_string(want)) + " block marked full: " + seen +
                                ", the masked ones would get weight" + where});
    else if (is == BlockKind::empty)
      v.failures.push_back(
          {b, h, q, k,
           std::string(to_string(want)) + " block missing: " + seen + ", a kernel would skip them" + where});
    else
      v.notes.push_back({b, h, q, k,
                         std::string(to_string(want)) + " block listed as partial: " + seen +
                             (want == BlockKind::empty ? ", wasted work" : ", the mask need not apply") + where});
  }
  return v;
}

namespace {
thread_local const BlockMask* g_current = nullptr;
}

const BlockMask* current_block_mask() { return g_current; }
BlockMaskScope::BlockMaskScope(const BlockMask* m) : saved_(g_current) { g_current = m; }
BlockMaskScope::~BlockMaskScope() { g_current = saved_; }

}  // namespace model
}  // namespace attncheck
