// numpy's .npz (a zip of .npy files) for `attncheck import`: the zip central directory (with zip64 extras, as
// np.savez writes them), members stored or deflated (np.savez_compressed, through zlib), and the .npy header
// ('descr', 'fortran_order', 'shape'). Little-endian float, integer and bool arrays; anything else is refused.
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <fstream>
#include <stdexcept>

#include "attncheck/user_arrays.hpp"

namespace attncheck {
namespace {

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw std::invalid_argument(file + ": " + what);
}

// Whether bytes [at, at + n) lie inside b; written so that an offset near 2^64 read from the file cannot wrap.
bool inside(const std::string& b, uint64_t at, uint64_t n) { return at <= b.size() && n <= b.size() - at; }

uint64_t le(const std::string& b, uint64_t at, int n, const std::string& file) {
  if (!inside(b, at, uint64_t(n))) fail(file, "truncated zip structure at byte " + std::to_string(at));
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + size_t(i)]);
  return v;
}

std::string inflate_raw(const std::string& in, uint64_t usize, const std::string& where) {
  std::string out(usize, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) fail(where, "zlib inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  const uint64_t got = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || got != usize)
    fail(where, "corrupt deflate data (zlib " + std::to_string(rc) + ", " + std::to_string(got) + " of " +
                    std::to_string(usize) + " bytes)");
  return out;
}

// The value of 'key' in the .npy header dict, e.g. "'<f4'", "False", "(2, 3)".
std::string header_value(const std::string& h, const std::string& key, const std::string& where) {
  const size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) fail(where, ".npy header has no '" + key + "': " + h);
  size_t a = h.find(':', k) + 1;
  while (a < h.size() && h[a] == ' ') ++a;
  size_t b = a;
  if (h[a] == '(')
    b = h.find(')', a) + 1;
  else if (h[a] == '\'')
    b = h.find('\'', a + 1) + 1;
  else
    while (b < h.size() && h[b] != ',' && h[b] != '}') ++b;
  return h.substr(a, b - a);
}

struct Descr {
  std::string name;
  int size;
  char kind;  // f, i, u, b
};

Descr parse_descr(const std::string& d, const std::string& where) {
  static const std::map<std::string, Descr> known = {
      {"<f2", {"float16", 2, 'f'}}, {"<f4", {"float32", 4, 'f'}}, {"<f8", {"float64", 8, 'f'}},
      {"|b1", {"bool", 1, 'b'}},    {"|i1", {"int8", 1, 'i'}},    {"|u1", {"uint8", 1, 'u'}},
      {"<i2", {"int16", 2, 'i'}},   {"<u2", {"uint16", 2, 'u'}},  {"<i4", {"int32", 4, 'i'}},
      {"<u4", {"uint32", 4, 'u'}},  {"<i8", {"int64", 8, 'i'}},   {"<u8", {"uint64", 8, 'u'}}};
  const auto it = known.find(d.size() > 2 ? d.substr(1, d.size() - 2) : d);
  if (it == known.end())
    fail(where, "dtype " + d + " is not supported (little-endian float16/32/64, bool, or integer arrays)");
  return it->second;
}

double element(const char* p, const Descr& d) {
  switch (d.kind) {
    case 'f':
      if (d.size == 2) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        const int e = (h >> 10) & 31, m = h & 1023;
        const double s = (h >> 15) ? -1.0 : 1.0;
        if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : s * HUGE_VAL;
        return e ? s * std::ldexp(1024.0 + m, e - 25) : s * std::ldexp(double(m), -24);
      }
      if (d.size == 4) {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      {
        double x;
        std::memcpy(&x, p, 8);
        return x;
      }
    case 'i': {
      int64_t v = 0;
      std::memcpy(&v, p, size_t(d.size));
      const int shift = 64 - 8 * d.size;
      return double((v << shift) >> shift);  // sign-extend: int8 -1 stays -1
    }
    default: {
      uint64_t v = 0;
      std::memcpy(&v, p, size_t(d.size));
      return double(v);
    }
  }
}

UserArray parse_npy(const std::string& b, const std::string& where) {
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) fail(where, "not a .npy array (bad magic)");
  const int major = static_cast<unsigned char>(b[6]);
  const size_t hl_bytes = major == 1 ? 2 : 4;
  const size_t hlen = le(b, 8, int(hl_bytes), where);
  const size_t data = 8 + hl_bytes + hlen;
  if (data > b.size()) fail(where, ".npy header runs past the end of the member");
  const std::string h = b.substr(8 + hl_bytes, hlen);
  const Descr d = parse_descr(header_value(h, "descr", where), where);
  const bool fortran = header_value(h, "fortran_order", where) == "True";
  UserArray a;
  a.dtype = d.name;
  const std::string s = header_value(h, "shape", where);
  for (size_t i = 1; i < s.size();) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',')) ++i;
    if (i >= s.size() || s[i] == ')') break;
    // Extents are non-negative decimal integers; anything else (signs, overflow, letters) names the header.
    size_t j = i;
    int64_t x = 0;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9' && x <= (int64_t{1} << 53)) x = x * 10 + (s[j++] - '0');
    if (j == i || x > (int64_t{1} << 53) || (j < s.size() && s[j] != ',' && s[j] != ')' && s[j] != ' '))
      fail(where, ".npy header: shape " + s + " is not a tuple of non-negative integers up to 2^53");
    a.shape.push_back(x);
    i = j;
  }
  double n = 1;
  for (int64_t x : a.shape) n *= double(x);
  if (double(b.size() - data) < n * d.size)
    fail(where, "holds " + std::to_string(b.size() - data) + " data bytes, shape " + s + " needs " +
                    std::to_string(int64_t(n) * d.size));
  a.values.resize(size_t(n));
  // Fortran order: element (i0..ik) of the C-order result sits at sum_j i_j * prod_{m<j} shape_m.
  const size_t rank = a.shape.size();
  std::vector<int64_t> idx(rank, 0), fstride(rank, 1);
  for (size_t j = 1; j < rank; ++j) fstride[j] = fstride[j - 1] * a.shape[j - 1];
  for (size_t c = 0; c < a.values.size(); ++c) {
    int64_t src = int64_t(c);
    if (fortran) {
      src = 0;
      for (size_t j = 0; j < rank; ++j) src += idx[j] * fstride[j];
      for (size_t j = rank; j-- > 0;) {
        if (++idx[j] < a.shape[j]) break;
        idx[j] = 0;
      }
    }
    a.values[c] = element(b.data() + data + size_t(src) * size_t(d.size), d);
  }
  return a;
}

}  // namespace

std::map<std::string, UserArray> read_npz(const std::string& path, uint64_t max_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, "cannot open");
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size > max_bytes)
    fail(path, "is " + std::to_string(size) + " bytes, more than the cap of " + std::to_string(max_bytes));
  std::string b(size, '\0');
  in.seekg(0);
  in.read(b.data(), std::streamsize(size));
  return parse_npz(b, path, max_bytes);
}

std::map<std::string, UserArray> parse_npz(const std::string& b, const std::string& path, uint64_t max_bytes) {
  if (b.size() > max_bytes)
    fail(path, "is " + std::to_string(b.size()) + " bytes, more than the cap of " + std::to_string(max_bytes));
  // End of central directory: the last "PK\5\6" within the final 64 KiB + 22 bytes.
  size_t eocd = std::string::npos;
  for (size_t i = b.size() >= 22 ? b.size() - 22 : 0; i != size_t(-1) && b.size() - i <= 65557 + 22; --i)
    if (b.compare(i, 4, "PK\x05\x06") == 0) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) fail(path, "not a zip archive (no end-of-central-directory record): .npz expected");
  uint64_t count = le(b, eocd + 10, 2, path), cd = le(b, eocd + 16, 4, path);
  if ((count == 0xFFFF || cd == 0xFFFFFFFF) && eocd >= 20 && b.compare(eocd - 20, 4, "PK\x06\x07") == 0) {
    const uint64_t z64 = le(b, eocd - 20 + 8, 8, path);
    if (!inside(b, z64, 4) || b.compare(z64, 4, "PK\x06\x06") != 0)
      fail(path, "bad zip64 end-of-central-directory record");
    count = le(b, z64 + 32, 8, path);
    cd = le(b, z64 + 48, 8, path);
  }
  std::map<std::string, UserArray> out;
  size_t at = cd;
  for (uint64_t e = 0; e < count; ++e) {
    if (le(b, at, 4, path) != 0x02014b50) fail(path, "bad zip central directory entry " + std::to_string(e));
    const uint64_t method = le(b, at + 10, 2, path), nlen = le(b, at + 28, 2, path), xlen = le(b, at + 30, 2, path),
                   clen = le(b, at + 32, 2, path);
    uint64_t csize = le(b, at + 20, 4, path), usize = le(b, at + 24, 4, path), local = le(b, at + 42, 4, path);
    const std::string name = b.substr(at + 46, nlen);
    for (size_t x = at + 46 + nlen; x + 4 <= at + 46 + nlen + xlen;) {  // zip64 extra: sizes and offset
      const uint64_t id = le(b, x, 2, path), len = le(b, x + 2, 2, path);
      if (id == 1) {
        size_t f = x + 4;
        if (usize == 0xFFFFFFFF) usize = le(b, f, 8, path), f += 8;
        if (csize == 0xFFFFFFFF) csize = le(b, f, 8, path), f += 8;
        if (local == 0xFFFFFFFF) local = le(b, f, 8, path);
      }
      x += 4 + len;
    }
    at += 46 + nlen + xlen + clen;
    const std::string where = path + ": " + name;
    if (le(b, local, 4, path) != 0x04034b50) fail(where, "bad zip local header");
    const uint64_t start = local + 30 + le(b, local + 26, 2, path) + le(b, local + 28, 2, path);
    if (!inside(b, start, csize) || usize > max_bytes) fail(where, "member extends past the end of the file");
    const std::string raw = b.substr(start, csize);
    std::string data;
    if (method == 0)
      data = raw;
    else if (method == 8)
      data = inflate_raw(raw, usize, where);
    else
      fail(where, "zip compression method " + std::to_string(method) + " is not supported (stored or deflate)");
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".npy") != 0) continue;
    out[name.substr(0, name.size() - 4)] = parse_npy(data, where);
  }
  return out;
}

}  // namespace attncheck
