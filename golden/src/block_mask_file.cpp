// Block masks as files (block_mask_file.hpp): read through the user-array reader (.npz or HDF5), written as a
// stored .npz (zip without compression, .npy v1.0 members) that numpy.load reads.
#include "attncheck/block_mask_file.hpp"

#include <zlib.h>

#include <algorithm>
#include <map>
#include <limits>
#include <stdexcept>

#include "attncheck/durable_file.hpp"
#include "attncheck/user_arrays.hpp"

namespace attncheck {
namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::invalid_argument(path + ": " + what);
}

std::vector<int64_t> integers(const std::string& path, const std::string& name, const UserArray& a) {
  if (a.is_float()) bad(path, name + ": dtype " + a.dtype + ", expected integers (torch's int32)");
  std::vector<int64_t> out(a.values.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(a.values[i]);  // exact: integers up to 2^53
  return out;
}

// Little-endian bytes of an unsigned value.
void put(std::string& s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

std::string npy_int32(const std::vector<int64_t>& values, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1)
    dims.erase(dims.size() - 2);  // "(3,)" for one dimension, "(1, 2, 3)" otherwise
  else if (!dims.empty())
    dims.erase(dims.size() - 1);
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01', out += '\x00';
  put(out, header.size(), 2);
  out += header;
  for (int64_t v : values) put(out, static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
  return out;
}

}  // namespace

BlockMask read_block_mask(const std::string& path, std::optional<std::pair<int64_t, int64_t>> sizes) {
  const std::vector<std::string> names = {"kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                                          "block_size"};
  const std::map<std::string, UserArray> a = read_user_arrays(path, uint64_t{2} << 30, names);
  for (const char* n : {"kv_num_blocks", "kv_indices"})
    if (!a.count(n))
      bad(path, std::string("no array named '") + n + "' (a block mask needs kv_num_blocks and kv_indices)");
  if (a.count("full_kv_num_blocks") != a.count("full_kv_indices"))
    bad(path, "full_kv_num_blocks and full_kv_indices come together (one of them is missing)");
  const UserArray& cnt = a.at("kv_num_blocks");
  const UserArray& idx = a.at("kv_indices");
  if (cnt.shape.size() != 3)
    bad(path, "kv_num_blocks: shape " + shape_string(cnt.shape) + ", expected [B, H, q_blocks]");
  if (idx.shape.size() != 4 || !std::equal(cnt.shape.begin(), cnt.shape.end(), idx.shape.begin()))
    bad(path, "kv_indices: shape " + shape_string(idx.shape) + ", expected kv_num_blocks' " + shape_string(cnt.shape) +
                  " plus the index slots");
  BlockMask m;
  m.B = cnt.shape[0], m.H = cnt.shape[1], m.q_blocks = cnt.shape[2], m.slots = idx.shape[3];
  m.kv_num_blocks = integers(path, "kv_num_blocks", cnt);
  m.kv_indices = integers(path, "kv_indices", idx);
  if (a.count("full_kv_num_blocks")) {
    const UserArray& fc = a.at("full_kv_num_blocks");
    const UserArray& fi = a.at("full_kv_indices");
    if (fc.shape != cnt.shape)
      bad(path, "full_kv_num_blocks: shape " + shape_string(fc.shape) + ", expected kv_num_blocks' " +
                    shape_string(cnt.shape));
    if (fi.shape != idx.shape)
      bad(path,
          "full_kv_indices: shape " + shape_string(fi.shape) + ", expected kv_indices' " + shape_string(idx.shape));
    m.full_kv_num_blocks = integers(path, "full_kv_num_blocks", fc);
    m.full_kv_indices = integers(path, "full_kv_indices", fi);
  } else {
    m.full_kv_num_blocks.assign(m.kv_num_blocks.size(), 0);
    m.full_kv_indices.assign(m.kv_indices.size(), 0);
  }
  std::pair<int64_t, int64_t> bs = sizes.value_or(std::pair<int64_t, int64_t>{128, 128});
  if (a.count("block_size")) {
    const UserArray& s = a.at("block_size");
    const std::vector<int64_t> v = integers(path, "block_size", s);
    if (v.size() != 2) bad(path, "block_size: " + std::to_string(v.size()) + " values, expected 2 (q_block, kv_block)");
    if (sizes && *sizes != std::pair<int64_t, int64_t>{v[0], v[1]})
      bad(path, "block_size: (" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ") disagrees with --q-block " +
                    std::to_string(sizes->first) + " --kv-block " + std::to_string(sizes->second));
    bs = {v[0], v[1]};
  }
  m.q_block = bs.first, m.kv_block = bs.second;
  return m;
}

void write_block_mask_npz(const std::string& path, const BlockMask& m) {
  const std::vector<int64_t> rows = {m.B, m.H, m.q_blocks}, slots = {m.B, m.H, m.q_blocks, m.slots};
  const std::pair<std::string, std::string> members[] = {
      {"kv_num_blocks.npy", npy_int32(m.kv_num_blocks, rows)},
      {"kv_indices.npy", npy_int32(m.kv_indices, slots)},
      {"full_kv_num_blocks.npy", npy_int32(m.full_kv_num_blocks, rows)},
      {"full_kv_indices.npy", npy_int32(m.full_kv_indices, slots)},
      {"block_size.npy", npy_int32({m.q_block, m.kv_block}, {2})}};
  for (const auto& [name, data] : members)
    if (data.size() > std::numeric_limits<uint32_t>::max()) bad(path, name + ": too large for a zip32 member");
  std::string zip, central;
  for (const auto& [name, data] : members) {
    const uint32_t crc =
        static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    const uint64_t offset = zip.size();
    put(zip, 0x04034b50, 4), put(zip, 20, 2), put(zip, 0, 2), put(zip, 0, 2);  // signature, version, flags, stored
    put(zip, 0, 2), put(zip, 0x21, 2);                                         // time, date (1980-01-01)
    put(zip, crc, 4), put(zip, data.size(), 4), put(zip, data.size(), 4), put(zip, name.size(), 2), put(zip, 0, 2);
    zip += name + data;
    put(central, 0x02014b50, 4), put(central, 20, 2), put(central, 20, 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0, 2), put(central, 0x21, 2), put(central, crc, 4), put(central, data.size(), 4);
    put(central, data.size(), 4), put(central, name.size(), 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0, 2), put(central, 0, 2), put(central, 0, 4), put(central, offset, 4);
    central += name;
  }
  const uint64_t at = zip.size();
  zip += central;
  put(zip, 0x06054b50, 4), put(zip, 0, 2), put(zip, 0, 2), put(zip, 5, 2), put(zip, 5, 2);
  put(zip, central.size(), 4), put(zip, at, 4), put(zip, 0, 2);
  write_file_durably(path, zip);
}

}  // namespace attncheck
