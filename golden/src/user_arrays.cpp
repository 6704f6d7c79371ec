// `attncheck import`'s input side: q, k, v, mask, bias, keep from a user's .npz or HDF5 file (see user_arrays.hpp),
// and the 0/1 check that names the first offending index. HDF5 booleans (h5py's enum) and signed integers are
// read without clipping, so an int8 -1 is reported, not silently turned into 0.
#include <filesystem>
#include <stdexcept>

#include "attncheck/user_arrays.hpp"
#include "h5.hpp"
#include "h5_ints.hpp"
#include "untrusted.hpp"

namespace attncheck {
namespace {

const char* const kNames[] = {"q", "k", "v", "mask", "bias", "keep", "past_key", "past_value"};

std::string h5_dtype_name(hid_t dset) {
  h5::Id t(H5Dget_type(dset), H5Tclose);
  const size_t bits = 8 * H5Tget_size(t);
  switch (H5Tget_class(t)) {
    case H5T_FLOAT: return "float" + std::to_string(bits);
    case H5T_ENUM: return "bool";
    default: return std::string(H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
  }
}

std::vector<std::string> wanted(const std::vector<std::string>& extra) {
  std::vector<std::string> names(std::begin(kNames), std::end(kNames));
  names.insert(names.end(), extra.begin(), extra.end());
  return names;
}

std::map<std::string, UserArray> read_h5(const std::string& path, uint64_t max_bytes,
                                         const std::vector<std::string>& extra) {
  h5::QuietErrors quiet;
  const h5::Reader r{path};
  h5::Id file = r.open_file();
  std::map<std::string, UserArray> out;
  // A fixture's arrays are under /inputs: an /inputs that is not a group is named, not taken for "no array q".
  if (r.has_object(file, "/inputs")) r.open_group(file, "/inputs");
  for (const std::string& n : wanted(extra)) {
    std::string where;
    for (const std::string& cand : {std::string("/") + n, std::string("/inputs/") + n})
      if (where.empty() && r.has_object(file, cand)) where = cand;
    if (where.empty()) continue;
    h5::Id d = r.open_dataset(file, where);
    UserArray a;
    a.shape = r.extents(d, where);
    double count = 1;
    for (int64_t x : a.shape) count *= double(x);
    if (count * 8 > double(max_bytes))
      r.fail(where, std::to_string(int64_t(count)) + " elements, more than the memory cap of " +
                        std::to_string(max_bytes) + " bytes");
    a.dtype = h5_dtype_name(d);
    h5::Id t(H5Dget_type(d), H5Tclose);
    if (H5Tget_class(t) == H5T_FLOAT) {
      a.values = r.read_as_double(d, where, size_t(count));
    } else if (h5::is_integer_like(d)) {
      const std::vector<int64_t> v = h5::read_integers(r, d, where, size_t(count));
      a.values.assign(v.begin(), v.end());
    } else {
      r.fail(where, "dtype must be a float, bool or integer type, got " + r.type_name(d));
    }
    out[n] = std::move(a);
  }
  return out;
}

}  // namespace

std::string index_string(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t j = shape.size(); j-- > 0;) {
    idx[j] = shape[j] ? flat % shape[j] : 0;
    flat = shape[j] ? flat / shape[j] : 0;
  }
  std::string s = "[";
  for (size_t j = 0; j < idx.size(); ++j) {
    if (j) s += ',';
    s += std::to_string(idx[j]);
  }
  return s + "]";
}

void check_zero_one(const std::string& what, const UserArray& a) {
  if (a.is_float())
    throw std::invalid_argument(what + ": dtype " + a.dtype +
                                " is not a mask type (bool or integer 0/1; an additive "
                                "float mask is a bias)");
  for (size_t n = 0; n < a.values.size(); ++n)
    if (a.values[n] != 0 && a.values[n] != 1)
      throw std::invalid_argument(what + ": values must be 0 or 1, got " + std::to_string(int64_t(a.values[n])) +
                                  " at index " + index_string(a.shape, int64_t(n)));
}

std::map<std::string, UserArray> select_user_arrays(std::map<std::string, UserArray> members,
                                                    const std::vector<std::string>& extra) {
  std::map<std::string, UserArray> out;
  for (const std::string& n : wanted(extra))
    if (auto it = members.find(n); it != members.end()) out[n] = std::move(it->second);
  return out;
}

std::map<std::string, UserArray> read_user_arrays(const std::string& path, uint64_t max_bytes,
                                                  const std::vector<std::string>& extra) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".npz") return select_user_arrays(read_npz(path, max_bytes), extra);
  if (ext == ".h5" || ext == ".hdf5")
    return h5::untrusted_read(path, "", [&] { return read_h5(path, max_bytes, extra); });
  throw std::invalid_argument(path + ": unknown file type '" + ext + "' (expected .npz, .h5 or .hdf5)");
}

}  // namespace attncheck
