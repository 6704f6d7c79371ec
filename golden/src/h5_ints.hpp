// Integer and boolean datasets of any width and sign, read without clipping: h5py writes numpy bool as an HDF5
// enum over int8 (FALSE=0, TRUE=1), and a signed int8 -1 must stay -1 so a 0/1 check can name it.
// Shared by the fixture reader (masks, keep-masks) and `attncheck import`.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "h5.hpp"

namespace attncheck::h5 {

// True for H5T_INTEGER and for enums over an integer (h5py bool).
bool is_integer_like(hid_t dset);
// Reads `n` elements of an integer-like dataset as int64 (unsigned values above INT64_MAX saturate).
std::vector<int64_t> read_integers(const Reader& r, hid_t dset, const std::string& where, size_t n);

}  // namespace attncheck::h5
