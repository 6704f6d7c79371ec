// Thin RAII and checking helpers over the HDF5 C API for the fixture library: deterministic writing (no object
// timestamps, fixed format bounds) and reading that checks class, size, rank and extents before allocating.
// Every reader error is std::invalid_argument "<file>: <field>: <what>".
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck::h5 {

// Owns one hid_t and closes it with the matching H5*close.
class Id {
 public:
  Id() = default;
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  ~Id() { reset(); }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  hid_t get() const { return id_; }
  hid_t release() { return std::exchange(id_, -1); }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// Silences HDF5's automatic error-stack printing for the lifetime of the object (we report our own messages).
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// IEEE binary16, little-endian, built the way h5py builds its float16 type (HDF5 1.10 has no H5T_IEEE_F16LE),
// so h5py reads it as numpy float16 and h5dump prints its values.
Id float16_type();
// The HDF5 file type of a dtype: fp16 -> float16_type(), bf16 -> uint16 bit patterns, fp8 -> uint8 codes (each
// of the last three plus an encoding attribute).
Id file_type(DType t);
// The value of a dataset's "encoding" attribute for a dtype stored as integer codes (ml_dtypes' names: "bfloat16",
// "float8_e4m3fn", "float8_e5m2"), or nullptr.
const char* encoding(DType t);

// ---- writing (throw std::runtime_error on HDF5 failures) ----------------------------------------------------
// A file built in memory (HDF5's core driver, no backing store) and written out by the caller with
// write_file_durably: HDF5 never writes to disk itself, so a full disk cannot leave a file whose close failed
// (HDF5 1.10 closes such a file again at exit and crashes). `path` only names the file in messages.
class MemoryFile {
 public:
  explicit MemoryFile(const std::string& path);
  ~MemoryFile();
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  hid_t id() const { return file_.get(); }
  // Closes the file; returns exactly the bytes HDF5 would have left on disk (what the sec2 driver writes).
  std::string close();
  struct Image;  // the captured buffer (h5.cpp)

 private:
  std::unique_ptr<Image> image_;  // declared first: outlives the file, whose close frees the buffer into it
  Id file_;
  std::string path_;
};
Id create_group(hid_t loc, const char* name);
void write_dataset(hid_t loc, const char* name, hid_t type, const std::vector<int64_t>& dims, const void* data);
void write_attr(hid_t loc, const char* name, int64_t v);
void write_attr_u64(hid_t loc, const char* name, uint64_t v);
void write_attr(hid_t loc, const char* name, double v);
void write_attr(hid_t loc, const char* name, const std::string& v);
void write_attr(hid_t loc, const char* name, const std::vector<int64_t>& v);
// A tensor's stored bytes in its file type, with its "dims" names and, for a dtype stored as integer codes, its
// "encoding"; and reference values in double with their "dims" names. Every fixture writer stores arrays this way.
void write_tensor(hid_t loc, const char* name, const Tensor& t, const std::vector<int64_t>& dims,
                  const std::string& dim_names);
void write_doubles(hid_t loc, const char* name, const std::vector<double>& v, const std::vector<int64_t>& dims,
                   const std::string& dim_names);

// ---- reading -------------------------------------------------------------------------------------------------
// `file` prefixes every message; `where` names the object ("/", "/inputs/q").
struct Reader {
  std::string file;
  // HDF5 1.10's variable-length string path crashes or loops on crafted files, so it is used only for fixtures
  // that declare schema_version 1 (written that way); everything else must store strings at fixed length.
  bool allow_vlen_strings = false;
  // Datasets read so far without a Fletcher32 checksum (files written before fixtures carried them, or by other
  // tools): their values are read, and a report says that damage to them could not be detected.
  mutable int64_t unchecksummed = 0;
  Id open_file() const;
  bool has_attr(hid_t loc, const char* name) const;
  int64_t attr_i64(hid_t loc, const std::string& where, const char* name) const;
  uint64_t attr_u64(hid_t loc, const std::string& where, const char* name) const;
  double attr_f64(hid_t loc, const std::string& where, const char* name) const;
  std::string attr_str(hid_t loc, const std::string& where, const char* name) const;
  std::vector<int64_t> attr_i64s(hid_t loc, const std::string& where, const char* name) const;
  // True when every component of `path` is a hard link; soft and external links are refused (they can point
  // anywhere on the machine), as is anything that is not a group or dataset.
  bool has_object(hid_t loc, const std::string& path) const;
  Id open_group(hid_t loc, const std::string& path) const;
  // Refuses storage the schema does not define: external files, virtual datasets, unknown layouts.
  Id open_dataset(hid_t loc, const std::string& path) const;
  std::vector<int64_t> extents(hid_t dset, const std::string& where) const;
  // Checks the extents equal `dims` (rank and every extent) before anything is allocated.
  void expect_extents(hid_t dset, const std::string& where, const std::vector<int64_t>& dims) const;
  // Checks the stored type can hold `t` exactly (fp16 dataset for fp16, bfloat16-encoded uint16 for bf16, ...).
  void expect_dtype(hid_t dset, const std::string& where, DType t) const;
  // Any floating type (or bfloat16-encoded uint16) read as double.
  std::vector<double> read_as_double(hid_t dset, const std::string& where, size_t n) const;
  // Raw read in the dtype's memory representation into `out` (size already checked).
  void read_raw(hid_t dset, const std::string& where, DType t, void* out) const;
  void read_i64(hid_t dset, const std::string& where, int64_t* out) const;
  // Every value read goes through here: a Fletcher32 mismatch is its own error naming the dataset.
  void read_values(hid_t dset, hid_t mtype, const std::string& where, void* out) const;
  // Whether the dataset carries HDF5's Fletcher32 checksum filter.
  bool checksummed(hid_t dset) const;
  [[noreturn]] void fail(const std::string& where, const std::string& what) const;
  std::string type_name(hid_t dset) const;
  // Whether a 16-bit integer dataset carries encoding="bfloat16".
  bool bf16_encoded(hid_t dset, const std::string& where) const { return encoded_as(dset, where, "bfloat16"); }
  // Whether a dataset carries the string attribute encoding=`name`.
  bool encoded_as(hid_t dset, const std::string& where, const char* name) const;
};

}  // namespace attncheck::h5
