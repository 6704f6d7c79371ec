// A user's own tensors for `attncheck import`: named n-d arrays read from numpy's .npz (np.savez or
// np.savez_compressed) or from an HDF5 file (h5py), widened to double, with masks checked to hold only 0/1.
// Errors are std::invalid_argument naming the file, the array and the offending value or index.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attncheck {

struct UserArray {
  std::string dtype;  // numpy's name: "float16", "float32", "float64", "bool", "int8", "uint16", ...
  std::vector<int64_t> shape;
  std::vector<double> values;  // C (row-major) order, exact for every float and for integers up to 2^53
  bool is_float() const { return dtype.rfind("float", 0) == 0; }
  bool is_integer_or_bool() const { return !is_float(); }
};

// Arrays named q, k, v, mask, bias, keep, past_key, past_value found in `path` (.npz: members "q.npy", ...; .h5/.hdf5:
// datasets /q or /inputs/q, ...), and those named in `extra` (auxiliary tensors of expressions). Other names are
// ignored. Refuses files larger than `max_bytes`.
std::map<std::string, UserArray> read_user_arrays(const std::string& path, uint64_t max_bytes = uint64_t{2} << 30,
                                                  const std::vector<std::string>& extra = {});

// The attention inputs and the `extra` arrays among `members` (every member of one file), as read_user_arrays
// selects them.
std::map<std::string, UserArray> select_user_arrays(std::map<std::string, UserArray> members,
                                                    const std::vector<std::string>& extra = {});

// The arrays of one .npz file (exposed for tests), every member.
std::map<std::string, UserArray> read_npz(const std::string& path, uint64_t max_bytes = uint64_t{2} << 30);
// The same from the file's bytes in memory (`path` names it in messages; the fuzz target's entry).
std::map<std::string, UserArray> parse_npz(const std::string& bytes, const std::string& path, uint64_t max_bytes);

// "[0,2,3,1]": a flat C-order element number as an index into `shape`.
std::string index_string(const std::vector<int64_t>& shape, int64_t flat);

// Throws naming `what` and the index of the first value that is not 0 or 1 (a mask or keep-mask).
void check_zero_one(const std::string& what, const UserArray& a);

}  // namespace attncheck
