// HDF5 helpers for the fixture library. Determinism: object time tracking is off on the file (root group),
// every group and every dataset, and the format bounds are fixed to the 1.8 format, so identical content gives
// identical bytes on every run. Every dataset with data carries HDF5's Fletcher32 checksum, which HDF5 checks on
// every read (the filter needs chunked storage; chunks are as large as allowed, so most datasets are one chunk).
#include "h5.hpp"

#include "untrusted.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace attncheck::h5 {

namespace {
[[noreturn]] void hdf5_failed(const std::string& what) { throw std::runtime_error("HDF5: " + what + " failed"); }

Id check(hid_t id, herr_t (*close)(hid_t), const std::string& what) {
  if (id < 0) hdf5_failed(what);
  return Id(id, close);
}
void check(herr_t rc, const std::string& what) {
  if (rc < 0) hdf5_failed(what);
}

Id no_times(hid_t cls) {
  Id pl = check(H5Pcreate(cls), H5Pclose, "H5Pcreate");
  check(H5Pset_obj_track_times(pl, false), "H5Pset_obj_track_times");
  return pl;
}

std::vector<hsize_t> to_hsize(const std::vector<int64_t>& dims) {
  std::vector<hsize_t> d;
  for (int64_t x : dims) d.push_back(static_cast<hsize_t>(x));
  return d;
}

void write_attr_raw(hid_t loc, const char* name, hid_t ftype, hid_t mtype, const std::vector<int64_t>& dims,
                    const void* data) {
  const auto d = to_hsize(dims);
  Id space = dims.empty()
                 ? check(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate")
                 : check(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr), H5Sclose, "H5Screate_simple");
  Id attr =
      check(H5Acreate2(loc, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose, std::string("H5Acreate2 ") + name);
  check(H5Awrite(attr, mtype, data), std::string("H5Awrite ") + name);
}
}  // namespace

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}
QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

Id float16_type() {
  Id t = check(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "H5Tcopy");
  // sign bit 15, exponent bits 10..14, mantissa bits 0..9, bias 15: IEEE binary16.
  check(H5Tset_fields(t, 15, 10, 5, 0, 10), "H5Tset_fields");
  check(H5Tset_size(t, 2), "H5Tset_size");
  check(H5Tset_ebias(t, 15), "H5Tset_ebias");
  return t;
}

Id file_type(DType t) {
  switch (t) {
    case DType::f64: return check(H5Tcopy(H5T_IEEE_F64LE), H5Tclose, "H5Tcopy");
    case DType::f32: return check(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "H5Tcopy");
    case DType::f16: return float16_type();
    case DType::bf16: return check(H5Tcopy(H5T_STD_U16LE), H5Tclose, "H5Tcopy");
    case DType::u8:
    case DType::e4m3:
    case DType::e5m2:
    case DType::q4_0:
    case DType::q4_1: return check(H5Tcopy(H5T_STD_U8LE), H5Tclose, "H5Tcopy");
    case DType::i8: return check(H5Tcopy(H5T_STD_I8LE), H5Tclose, "H5Tcopy");
  }
  hdf5_failed("file_type");
}

const char* encoding(DType t) {
  return t == DType::bf16   ? "bfloat16"
         : t == DType::e4m3 ? "float8_e4m3fn"
         : t == DType::e5m2 ? "float8_e5m2"
         : t == DType::q4_0 ? "q4_0"  // bytes of two 4-bit codes (kv_cache.hpp's nibble order)
         : t == DType::q4_1 ? "q4_1"
                            : nullptr;
}

// ---- writing -------------------------------------------------------------------------------------------------
// The core driver's buffer goes through these callbacks, so the image it holds at close is captured instead of
// freed. Its length is the largest extent written (increment 1); the file's true end is the superblock's EOF
// address, which HDF5 writes last at close (sec2 truncates or extends the file to it).
struct MemoryFile::Image {
  void* buf = nullptr;
  size_t size = 0;
  std::string bytes;
  bool closed = false;
};

namespace {
using Img = MemoryFile::Image;
void* img_malloc(size_t size, H5FD_file_image_op_t, void* u) {
  auto* im = static_cast<Img*>(u);
  void* p = std::malloc(size ? size : 1);
  if (p) im->buf = p, im->size = size;
  return p;
}
void* img_memcpy(void* dst, const void* src, size_t size, H5FD_file_image_op_t, void*) {
  return std::memcpy(dst, src, size);
}
void* img_realloc(void* ptr, size_t size, H5FD_file_image_op_t, void* u) {
  auto* im = static_cast<Img*>(u);
  void* p = std::realloc(ptr, size ? size : 1);
  if (p) im->buf = p, im->size = size;
  return p;
}
herr_t img_free(void* ptr, H5FD_file_image_op_t op, void* u) {
  auto* im = static_cast<Img*>(u);
  if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && ptr == im->buf) {
    im->bytes.assign(static_cast<const char*>(ptr), im->size);
    im->closed = true;
  }
  std::free(ptr);
  return 0;
}
// Bob Jenkins' lookup3 hashlittle(), the checksum HDF5 puts on its version-2 metadata (H5_checksum_lookup3).
uint32_t lookup3(const unsigned char* k, size_t length, uint32_t initval) {
  auto rot = [](uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
  uint32_t a, b, c;
  a = b = c = 0xdeadbeef + static_cast<uint32_t>(length) + initval;
  auto word = [&](size_t at, size_t n) {  // up to 4 bytes, little-endian
    uint32_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint32_t{k[at + i]} << (8 * i);
    return v;
  };
  while (length > 12) {
    a += word(0, 4), b += word(4, 4), c += word(8, 4);
    a -= c, a ^= rot(c, 4), c += b;
    b -= a, b ^= rot(a, 6), a += c;
    c -= b, c ^= rot(b, 8), b += a;
    a -= c, a ^= rot(c, 16), c += b;
    b -= a, b ^= rot(a, 19), a += c;
    c -= b, c ^= rot(b, 4), b += a;
    length -= 12, k += 12;
  }
  if (length == 0) return c;
  a += word(0, std::min<size_t>(length, 4));
  if (length > 4) b += word(4, std::min<size_t>(length - 4, 4));
  if (length > 8) c += word(8, length - 8);
  c ^= b, c -= rot(b, 14);
  a ^= c, a -= rot(c, 11);
  b ^= a, b -= rot(a, 25);
  c ^= b, c -= rot(b, 16);
  a ^= c, a -= rot(c, 4);
  b ^= a, b -= rot(a, 14);
  c ^= b, c -= rot(b, 24);
  return c;
}

uint64_t le_at(const std::string& b, uint64_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(b[at + static_cast<uint64_t>(i)]);
  return v;
}

// HDF5 creates the superblock extension's object header (it holds the chunk B-tree K set in the constructor) with
// timestamps whatever the property lists say. They are zeroed, and the header's checksum recomputed, so identical
// content gives identical bytes. A version-2 object header: "OHDR", version 2, flags; four 32-bit times when flag
// 0x20; two 16-bit attribute limits when 0x10; chunk 0's size in 1 << (flags & 3) bytes; chunk 0; lookup3 checksum.
void clear_extension_times(std::string& b, uint64_t at, const std::string& path) {
  auto bad = [&] { throw std::runtime_error("HDF5: " + path + ": unexpected superblock extension layout"); };
  if (at > b.size() || b.size() - at < 8 || b.compare(at, 4, "OHDR") != 0 || b[at + 4] != 2) bad();
  const unsigned flags = static_cast<unsigned char>(b[at + 5]);
  if (!(flags & 0x20)) return;
  const uint64_t width = uint64_t{1} << (flags & 3), size_at = at + 6 + 16 + ((flags & 0x10) ? 4 : 0);
  if (size_at + width > b.size()) bad();
  const uint64_t end = size_at + width + le_at(b, size_at, static_cast<int>(width));  // the checksum's offset
  if (end < size_at || end + 4 > b.size()) bad();
  auto sum = [&] { return lookup3(reinterpret_cast<const unsigned char*>(b.data() + at), end - at, 0); };
  if (sum() != le_at(b, end, 4)) bad();  // the layout is what this code expects
  std::fill(b.begin() + static_cast<ptrdiff_t>(at + 6), b.begin() + static_cast<ptrdiff_t>(at + 22), '\0');
  const uint32_t c = sum();
  for (int i = 0; i < 4; ++i) b[end + static_cast<uint64_t>(i)] = static_cast<char>(c >> (8 * i));
}

void* udata_copy(void* u) { return u; }  // one Image shared by every copy of the property list
herr_t udata_free(void*) { return 0; }
}  // namespace

MemoryFile::MemoryFile(const std::string& path) : image_(std::make_unique<Image>()), path_(path) {
  Id fcpl = no_times(H5P_FILE_CREATE);  // the root group is created from the file creation property list
  // A chunk index B-tree node holds 2K entries and is allocated whole: K = 32 (the default) costs ~3.6 kB per
  // dataset although nearly every dataset is one chunk; K = 1 costs ~0.2 kB.
  check(H5Pset_istore_k(fcpl, 1), "H5Pset_istore_k");
  Id fapl = check(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate");
  check(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18), "H5Pset_libver_bounds");
  check(H5Pset_fapl_core(fapl, 1, false), "H5Pset_fapl_core");
  H5FD_file_image_callbacks_t cb{img_malloc, img_memcpy, img_realloc, img_free, udata_copy, udata_free, image_.get()};
  check(H5Pset_file_image_callbacks(fapl, &cb), "H5Pset_file_image_callbacks");
  file_ = check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl), H5Fclose, "H5Fcreate " + path);
}

MemoryFile::~MemoryFile() = default;

std::string MemoryFile::close() {
  // Objects still open would keep the file open past H5Fclose, and its image would not be captured yet.
  if (H5Fget_obj_count(file_, H5F_OBJ_ALL | H5F_OBJ_LOCAL) != 1)
    throw std::logic_error("HDF5: " + path_ + ": MemoryFile::close with objects still open");
  check(H5Fclose(file_.release()), "H5Fclose " + path_);
  std::string& b = image_->bytes;
  // Superblock version 2 (the 1.8 format): signature, version, offset size 8, ..., superblock extension address at
  // byte 20, EOF address at byte 28.
  static const char sig[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  if (!image_->closed || b.size() < 48 || std::memcmp(b.data(), sig, 8) != 0 || b[8] != 2 || b[9] != 8)
    throw std::runtime_error("HDF5: " + path_ + ": the in-memory file has no version-2 superblock");
  const uint64_t eof = le_at(b, 28, 8);
  if (eof < 48 || eof > (uint64_t{1} << 40)) throw std::runtime_error("HDF5: " + path_ + ": bad end of file address");
  b.resize(static_cast<size_t>(eof), '\0');
  if (const uint64_t ext = le_at(b, 20, 8); ext != ~uint64_t{0}) clear_extension_times(b, ext, path_);
  return std::move(b);
}

Id create_group(hid_t loc, const char* name) {
  Id gcpl = no_times(H5P_GROUP_CREATE);
  return check(H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose, std::string("H5Gcreate2 ") + name);
}

void write_dataset(hid_t loc, const char* name, hid_t type, const std::vector<int64_t>& dims, const void* data) {
  const auto d = to_hsize(dims);
  Id space = check(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr), H5Sclose, "H5Screate_simple");
  Id dcpl = no_times(H5P_DATASET_CREATE);
  check(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  // A dataset without elements has no stored bytes to protect (and cannot be chunked).
  if (!d.empty() && std::find(d.begin(), d.end(), hsize_t{0}) == d.end()) {
    // HDF5 limits a chunk to 4 GiB; halving the largest extent until a chunk fits 1 GiB keeps chunks whole.
    std::vector<hsize_t> chunk = d;
    const size_t elem = H5Tget_size(type);
    auto bytes = [&] {
      hsize_t b = elem;
      for (hsize_t x : chunk) b *= x;
      return b;
    };
    while (bytes() > (hsize_t{1} << 30)) {
      hsize_t& big = *std::max_element(chunk.begin(), chunk.end());
      big = (big + 1) / 2;
    }
    check(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), "H5Pset_chunk");
    check(H5Pset_fletcher32(dcpl), "H5Pset_fletcher32");
  }
  Id dset = check(H5Dcreate2(loc, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose,
                  std::string("H5Dcreate2 ") + name);
  check(H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), std::string("H5Dwrite ") + name);
}

void write_attr(hid_t loc, const char* name, int64_t v) {
  write_attr_raw(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, {}, &v);
}
void write_attr_u64(hid_t loc, const char* name, uint64_t v) {
  write_attr_raw(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, {}, &v);
}
void write_attr(hid_t loc, const char* name, double v) {
  write_attr_raw(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {}, &v);
}
void write_attr(hid_t loc, const char* name, const std::vector<int64_t>& v) {
  write_attr_raw(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, {static_cast<int64_t>(v.size())}, v.data());
}

void write_tensor(hid_t loc, const char* name, const Tensor& t, const std::vector<int64_t>& dims,
                  const std::string& dim_names) {
  write_dataset(loc, name, file_type(t.dtype), dims, t.bytes.data());
  Id d(H5Dopen2(loc, name, H5P_DEFAULT), H5Dclose);
  write_attr(d, "dims", dim_names);
  if (const char* e = encoding(t.dtype)) write_attr(d, "encoding", std::string(e));
}

void write_doubles(hid_t loc, const char* name, const std::vector<double>& v, const std::vector<int64_t>& dims,
                   const std::string& dim_names) {
  write_dataset(loc, name, H5T_NATIVE_DOUBLE, dims, v.data());
  Id d(H5Dopen2(loc, name, H5P_DEFAULT), H5Dclose);
  write_attr(d, "dims", dim_names);
}
void write_attr(hid_t loc, const char* name, const std::string& v) {
  // Fixed-length UTF-8, NUL-padded (schema_version 2): readers of untrusted files never need HDF5's
  // variable-length string path. h5py returns numpy.bytes_; h5dump prints it quoted.
  Id t = check(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
  check(H5Tset_size(t, std::max<size_t>(v.size(), 1)), "H5Tset_size");
  check(H5Tset_strpad(t, H5T_STR_NULLPAD), "H5Tset_strpad");
  check(H5Tset_cset(t, H5T_CSET_UTF8), "H5Tset_cset");
  std::string padded = v;
  padded.resize(std::max<size_t>(v.size(), 1), '\0');
  write_attr_raw(loc, name, t, t, {}, padded.data());
}

// ---- reading -------------------------------------------------------------------------------------------------
void Reader::fail(const std::string& where, const std::string& what) const {
  throw std::invalid_argument(file + ": " + where + ": " + what);
}

namespace {
// The core driver reads the caller's buffer in place: every callback hands back the image's own bytes (the file
// is opened read-only, so HDF5 never writes to them or asks to resize them).
void* image_malloc(size_t, H5FD_file_image_op_t, void* u) { return u; }
void* image_memcpy(void* dst, const void*, size_t, H5FD_file_image_op_t, void*) { return dst; }
void* image_realloc(void*, size_t, H5FD_file_image_op_t, void*) { return nullptr; }
herr_t image_free(void*, H5FD_file_image_op_t, void*) { return 0; }
void* image_udata_copy(void* u) { return u; }
herr_t image_udata_free(void*) { return 0; }

// HDF5's signature at byte 0, 512, 1024, 2048, ... (a user block may precede the superblock).
bool has_hdf5_signature(const std::string& b) {
  static const char sig[] = "\x89HDF\r\n\x1a\n";
  for (size_t at = 0; at + 8 <= b.size(); at = at ? 2 * at : 512)
    if (std::memcmp(b.data() + at, sig, 8) == 0) return true;
  return false;
}
}  // namespace

Id Reader::open_file() const {
  if (const FileImage* img = ImageScope::current(); img && img->path == file) {
    int64_t* kept = ImageScope::kept_file();
    if (kept && *kept >= 0) {
      if (H5Iinc_ref(*kept) < 0) fail("file", "cannot share the open file (H5Iinc_ref)");
      return Id(*kept, H5Fclose);  // closes this reference only: the scope holds its own
    }
    if (!has_hdf5_signature(img->bytes)) fail("file", "not an HDF5 file");
    Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    void* buf = const_cast<char*>(img->bytes.data());
    H5FD_file_image_callbacks_t cb{image_malloc,     image_memcpy, image_realloc, image_free, image_udata_copy,
                                   image_udata_free, buf};
    if (fapl.get() < 0 || H5Pset_fapl_core(fapl, 1 << 16, false) < 0 || H5Pset_file_image_callbacks(fapl, &cb) < 0 ||
        H5Pset_file_image(fapl, buf, img->bytes.size()) < 0)
      fail("file", "cannot set up reading it from memory (HDF5 core driver)");
    // The core driver refuses to open an image under the name of a file that exists, and two opens under one
    // name would be taken for the same file: a fresh name under /proc, where no file can ever be created.
    static std::atomic<uint64_t> opened{0};
    const std::string name = "/proc/attncheck-image-" + std::to_string(opened++);
    const hid_t f = H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl);
    if (f < 0) fail("file", "H5Fopen failed (truncated or corrupt HDF5 file?)");
    if (kept && H5Iinc_ref(f) >= 0) *kept = f;
    return Id(f, H5Fclose);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) fail("file", "is a directory, expected an HDF5 file");
  // A FIFO would block the open forever and a device could be endless: only regular files (or links to them).
  const auto st = std::filesystem::status(file, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    fail("file", "is not a regular file (FIFO, socket or device); fixtures and candidates must be regular files");
  const htri_t is = H5Fis_hdf5(file.c_str());
  if (is < 0) fail("file", "cannot open (missing or unreadable)");
  if (is == 0) fail("file", "not an HDF5 file");
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) fail("file", "H5Fopen failed (truncated or corrupt HDF5 file?)");
  return Id(f, H5Fclose);
}

bool Reader::has_attr(hid_t loc, const char* name) const { return H5Aexists(loc, name) > 0; }

namespace {
struct Attr {
  Id attr, type, space;
  H5T_class_t cls;
  int64_t n;
};
Attr open_attr(const Reader& r, hid_t loc, const std::string& where, const char* name) {
  if (H5Aexists(loc, name) <= 0) r.fail(where, std::string("missing attribute '") + name + "'");
  Attr a;
  a.attr = Id(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  if (!a.attr.valid()) r.fail(where, std::string("cannot open attribute '") + name + "'");
  a.type = Id(H5Aget_type(a.attr), H5Tclose);
  a.space = Id(H5Aget_space(a.attr), H5Sclose);
  a.cls = H5Tget_class(a.type);
  a.n = static_cast<int64_t>(H5Sget_simple_extent_npoints(a.space));
  return a;
}
}  // namespace

int64_t Reader::attr_i64(hid_t loc, const std::string& where, const char* name) const {
  Attr a = open_attr(*this, loc, where, name);
  if (a.cls != H5T_INTEGER || a.n != 1) fail(where, std::string("attribute '") + name + "' must be a scalar integer");
  int64_t v = 0;
  if (H5Aread(a.attr, H5T_NATIVE_INT64, &v) < 0) fail(where, std::string("cannot read attribute '") + name + "'");
  return v;
}

uint64_t Reader::attr_u64(hid_t loc, const std::string& where, const char* name) const {
  Attr a = open_attr(*this, loc, where, name);
  if (a.cls != H5T_INTEGER || a.n != 1) fail(where, std::string("attribute '") + name + "' must be a scalar integer");
  uint64_t v = 0;
  if (H5Aread(a.attr, H5T_NATIVE_UINT64, &v) < 0) fail(where, std::string("cannot read attribute '") + name + "'");
  return v;
}

double Reader::attr_f64(hid_t loc, const std::string& where, const char* name) const {
  Attr a = open_attr(*this, loc, where, name);
  if ((a.cls != H5T_FLOAT && a.cls != H5T_INTEGER) || a.n != 1)
    fail(where, std::string("attribute '") + name + "' must be a scalar number");
  double v = 0;
  if (H5Aread(a.attr, H5T_NATIVE_DOUBLE, &v) < 0) fail(where, std::string("cannot read attribute '") + name + "'");
  return v;
}

namespace {
constexpr size_t kMaxStringAttr = 1 << 20;  // longer than any string the schema defines
}  // namespace

std::string Reader::attr_str(hid_t loc, const std::string& where, const char* name) const {
  Attr a = open_attr(*this, loc, where, name);
  if (a.cls != H5T_STRING || a.n != 1) fail(where, std::string("attribute '") + name + "' must be a scalar string");
  if (H5Tis_variable_str(a.type) > 0) {
    if (!allow_vlen_strings)
      fail(where, std::string("attribute '") + name +
                      "' is a variable-length string; schema_version >= 2 and candidates store strings at fixed "
                      "length (variable-length strings of untrusted files are refused)");
    Id mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(a.type));
    char* p = nullptr;
    if (H5Aread(a.attr, mt, &p) < 0) fail(where, std::string("cannot read attribute '") + name + "'");
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const size_t size = H5Tget_size(a.type);
  if (size == 0 || size > kMaxStringAttr)
    fail(where, std::string("attribute '") + name + "' has a string size of " + std::to_string(size) +
                    " bytes, outside 1.." + std::to_string(kMaxStringAttr));
  std::string s(size, '\0');
  if (H5Aread(a.attr, a.type, s.data()) < 0) fail(where, std::string("cannot read attribute '") + name + "'");
  s.resize(std::strlen(s.c_str()));
  return s;
}

std::vector<int64_t> Reader::attr_i64s(hid_t loc, const std::string& where, const char* name) const {
  Attr a = open_attr(*this, loc, where, name);
  if (a.cls != H5T_INTEGER || H5Sget_simple_extent_ndims(a.space) != 1 || a.n > 64)
    fail(where, std::string("attribute '") + name + "' must be a 1-D integer array of at most 64 entries");
  std::vector<int64_t> v(static_cast<size_t>(a.n));
  if (H5Aread(a.attr, H5T_NATIVE_INT64, v.data()) < 0) fail(where, std::string("cannot read attribute '") + name + "'");
  return v;
}

bool Reader::has_object(hid_t loc, const std::string& path) const {
  // Check each component so that a missing parent group does not raise an HDF5 error, and refuse soft and
  // external links before HDF5 follows them.
  std::string partial;
  size_t pos = 0;
  while (pos < path.size()) {
    size_t next = path.find('/', pos + 1);
    if (next == std::string::npos) next = path.size();
    partial = path.substr(0, next);
    pos = next;
    if (partial == "/") continue;
    if (H5Lexists(loc, partial.c_str(), H5P_DEFAULT) <= 0) return false;
    H5L_info_t info;
    if (H5Lget_info(loc, partial.c_str(), &info, H5P_DEFAULT) < 0) fail(partial, "cannot read link information");
    if (info.type == H5L_TYPE_SOFT) fail(partial, "is a soft link; links are refused in fixtures and candidates");
    if (info.type != H5L_TYPE_HARD)
      fail(partial, "is an external or user-defined link; links are refused in fixtures and candidates");
  }
  return H5Oexists_by_name(loc, path.c_str(), H5P_DEFAULT) > 0;
}

Id Reader::open_group(hid_t loc, const std::string& path) const {
  if (!has_object(loc, path)) fail(path, "missing group");
  Id g(H5Gopen2(loc, path.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.valid()) fail(path, "is not a group");
  return g;
}

Id Reader::open_dataset(hid_t loc, const std::string& path) const {
  if (!has_object(loc, path)) fail(path, "missing dataset");
  Id d(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) fail(path, "is not a dataset");
  // External storage would read another file's bytes; a virtual dataset with missing sources reads as fill.
  Id dcpl(H5Dget_create_plist(d), H5Pclose);
  if (!dcpl.valid()) fail(path, "cannot read the dataset's creation properties");
  if (H5Pget_external_count(dcpl) != 0) fail(path, "uses external storage (data in another file); refused");
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_VIRTUAL) fail(path, "is a virtual dataset; refused");
  if (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT && layout != H5D_CHUNKED)
    fail(path, "has a storage layout the schema does not define (" + std::to_string(int(layout)) + ")");
  return d;
}

std::vector<int64_t> Reader::extents(hid_t dset, const std::string& where) const {
  Id space(H5Dget_space(dset), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0 || rank > 8) fail(where, "unsupported dataspace");
  std::vector<hsize_t> d(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space, d.data(), nullptr);
  std::vector<int64_t> out;
  for (hsize_t x : d) out.push_back(static_cast<int64_t>(x));
  return out;
}

void Reader::expect_extents(hid_t dset, const std::string& where, const std::vector<int64_t>& dims) const {
  const auto got = extents(dset, where);
  if (got.size() != dims.size())
    fail(where, "rank must be " + std::to_string(dims.size()) + " with shape " + shape_string(dims) + ", got rank " +
                    std::to_string(got.size()) + " shape " + shape_string(got));
  if (got != dims) fail(where, "shape must be " + shape_string(dims) + ", got " + shape_string(got));
}

std::string Reader::type_name(hid_t dset) const {
  Id t(H5Dget_type(dset), H5Tclose);
  const size_t bits = H5Tget_size(t) * 8;
  switch (H5Tget_class(t)) {
    case H5T_FLOAT: return std::to_string(bits) + "-bit float";
    case H5T_INTEGER:
      return std::string(H5Tget_sign(t) == H5T_SGN_NONE ? "unsigned " : "signed ") + std::to_string(bits) +
             "-bit integer";
    case H5T_STRING: return "string";
    default: return "non-numeric type";
  }
}

bool Reader::encoded_as(hid_t dset, const std::string& where, const char* name) const {
  if (H5Aexists(dset, "encoding") <= 0) return false;
  {
    Id a(H5Aopen(dset, "encoding", H5P_DEFAULT), H5Aclose);
    Id t(H5Aget_type(a), H5Tclose);
    if (H5Tget_class(t) != H5T_STRING) return false;
  }
  return attr_str(dset, where, "encoding") == name;
}

void Reader::expect_dtype(hid_t dset, const std::string& where, DType want) const {
  Id t(H5Dget_type(dset), H5Tclose);
  const H5T_class_t cls = H5Tget_class(t);
  const size_t size = H5Tget_size(t);
  bool ok = false;
  switch (want) {
    case DType::f64: ok = cls == H5T_FLOAT && size == 8; break;
    case DType::f32: ok = cls == H5T_FLOAT && size == 4; break;
    case DType::f16: ok = cls == H5T_FLOAT && size == 2; break;
    // Unsigned only: a signed 16-bit dataset would clip every negative bit pattern to 0 on conversion.
    case DType::bf16:
      ok = cls == H5T_INTEGER && size == 2 && H5Tget_sign(t) == H5T_SGN_NONE && bf16_encoded(dset, where);
      break;
    case DType::u8: ok = cls == H5T_INTEGER && size == 1 && H5Tget_sign(t) == H5T_SGN_NONE; break;
    case DType::i8: ok = cls == H5T_INTEGER && size == 1 && H5Tget_sign(t) == H5T_SGN_2; break;
    case DType::e4m3:
    case DType::e5m2:
    case DType::q4_0:
    case DType::q4_1:
      ok = cls == H5T_INTEGER && size == 1 && H5Tget_sign(t) == H5T_SGN_NONE && encoded_as(dset, where, encoding(want));
      break;
  }
  if (!ok) {
    const std::string fp8 = std::string(to_string(want)) +
                            (is_q4(want) ? " (unsigned bytes of two 4-bit codes with attribute encoding=\""
                                         : " (unsigned 8-bit codes with attribute encoding=\"") +
                            (encoding(want) ? encoding(want) : "") + "\")";
    const char* want_s = want == DType::bf16
                             ? "bf16 (unsigned uint16 bit patterns with attribute encoding=\"bfloat16\")"
                         : want == DType::u8           ? "u8 (unsigned 8-bit integer, 0/1)"
                         : want == DType::i8           ? "int8 (signed 8-bit integer codes)"
                         : is_fp8(want) || is_q4(want) ? fp8.c_str()
                                                       : to_string(want);
    fail(where, std::string("dtype must be ") + want_s + ", got " + type_name(dset) +
                    (cls == H5T_INTEGER && size == 2 && H5Tget_sign(t) != H5T_SGN_NONE ? " (signed)"
                     : cls == H5T_INTEGER && size == 2 && !bf16_encoded(dset, where) ? " without encoding=\"bfloat16\""
                                                                                     : ""));
  }
}

bool Reader::checksummed(hid_t dset) const {
  Id dcpl(H5Dget_create_plist(dset), H5Pclose);
  return dcpl.valid() &&
         H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, nullptr, nullptr, nullptr, 0, nullptr, nullptr) >= 0;
}

void Reader::read_values(hid_t dset, hid_t mtype, const std::string& where, void* out) const {
  if (H5Dread(dset, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0) {
    if (!checksummed(dset)) ++unchecksummed;
    return;
  }
  // HDF5 reports a failed Fletcher32 check only as a failed read; reading again with the check off tells a
  // damaged value apart from damaged structure (the values read that way are discarded).
  if (checksummed(dset)) {
    Id dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
    if (dxpl.valid() && H5Pset_edc_check(dxpl, H5Z_DISABLE_EDC) >= 0 &&
        H5Dread(dset, mtype, H5S_ALL, H5S_ALL, dxpl, out) >= 0)
      fail(where,
           "Fletcher32 checksum mismatch: the stored values are damaged (a changed bit or byte in the file); "
           "restore the file from its source or regenerate it");
  }
  fail(where, "cannot read data");
}

void Reader::read_raw(hid_t dset, const std::string& where, DType t, void* out) const {
  Id mt;
  switch (t) {
    case DType::f64: mt = Id(H5Tcopy(H5T_NATIVE_DOUBLE), H5Tclose); break;
    case DType::f32: mt = Id(H5Tcopy(H5T_NATIVE_FLOAT), H5Tclose); break;
    case DType::f16: mt = float16_type(); break;
    case DType::bf16: mt = Id(H5Tcopy(H5T_NATIVE_UINT16), H5Tclose); break;
    case DType::u8:
    case DType::e4m3:
    case DType::e5m2:
    case DType::q4_0:
    case DType::q4_1: mt = Id(H5Tcopy(H5T_NATIVE_UINT8), H5Tclose); break;
    case DType::i8: mt = Id(H5Tcopy(H5T_NATIVE_INT8), H5Tclose); break;
  }
  read_values(dset, mt, where, out);
}

void Reader::read_i64(hid_t dset, const std::string& where, int64_t* out) const {
  Id t(H5Dget_type(dset), H5Tclose);
  if (H5Tget_class(t) != H5T_INTEGER) fail(where, "dtype must be an integer type, got " + type_name(dset));
  read_values(dset, H5T_NATIVE_INT64, where, out);
}

std::vector<double> Reader::read_as_double(hid_t dset, const std::string& where, size_t n) const {
  Id t(H5Dget_type(dset), H5Tclose);
  const H5T_class_t cls = H5Tget_class(t);
  std::vector<double> out(n);
  if (cls == H5T_FLOAT) {
    read_values(dset, H5T_NATIVE_DOUBLE, where, out.data());
    return out;
  }
  if (cls == H5T_INTEGER && H5Tget_size(t) == 2 && H5Tget_sign(t) == H5T_SGN_NONE && bf16_encoded(dset, where)) {
    std::vector<uint16_t> bits(n);
    read_raw(dset, where, DType::bf16, bits.data());
    for (size_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(bits[i]);
    return out;
  }
  fail(where, "dtype must be a floating type (fp16, fp32, fp64, or uint16 with encoding=\"bfloat16\"), got " +
                  type_name(dset));
}

}  // namespace attncheck::h5
