// Helpers for tests that damage fixtures with the HDF5 C API (test_malformed, tests/hostile).
#pragma once

#include <hdf5.h>

#include <cstdint>

namespace attncheck::test {

// Replaces the root attribute `name` by a scalar int64 (whatever type, rank or value it had).
inline void set_i64_attr(hid_t f, const char* name, int64_t v) {
  H5Adelete(f, name);
  const hid_t s = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Sclose(s);
}

}  // namespace attncheck::test
