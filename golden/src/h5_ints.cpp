// Integer-like HDF5 datasets (integers of any width/sign, h5py's enum bool) read as int64: see h5_ints.hpp.
#include "h5_ints.hpp"

#include <cstring>
#include <limits>

namespace attncheck::h5 {

bool is_integer_like(hid_t dset) {
  Id t(H5Dget_type(dset), H5Tclose);
  const H5T_class_t cls = H5Tget_class(t);
  if (cls == H5T_INTEGER) return true;
  if (cls != H5T_ENUM) return false;
  Id base(H5Tget_super(t), H5Tclose);
  return H5Tget_class(base) == H5T_INTEGER && H5Tget_size(base) <= 8;
}

std::vector<int64_t> read_integers(const Reader& r, hid_t dset, const std::string& where, size_t n) {
  if (!is_integer_like(dset)) r.fail(where, "dtype must be bool or an integer type, got " + r.type_name(dset));
  Id t(H5Dget_type(dset), H5Tclose);
  std::vector<int64_t> out(n);
  if (H5Tget_class(t) == H5T_INTEGER) {
    // HDF5 converts any integer to int64 exactly (uint64 beyond INT64_MAX saturates, still not 0/1).
    r.read_values(dset, H5T_NATIVE_INT64, where, out.data());
    return out;
  }
  // An enum converts only to an enum: read it in its native form, then widen its base integers by hand.
  Id mt(H5Tget_native_type(t, H5T_DIR_ASCEND), H5Tclose);
  Id base(H5Tget_super(mt), H5Tclose);
  const size_t size = H5Tget_size(base);
  const bool is_signed = H5Tget_sign(base) != H5T_SGN_NONE;
  std::vector<unsigned char> raw(n * size);
  r.read_values(dset, mt, where, raw.data());
  for (size_t i = 0; i < n; ++i) {
    uint64_t u = 0;
    std::memcpy(&u, raw.data() + i * size, size);  // little-endian host
    const int shift = int(64 - 8 * size);
    if (is_signed)
      out[i] = shift == 64 ? 0 : static_cast<int64_t>(u << shift) >> shift;
    else
      out[i] = u > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max() : int64_t(u);
  }
  return out;
}

}  // namespace attncheck::h5
