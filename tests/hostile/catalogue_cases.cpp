// The catalogue's cases (catalogue.hpp): every root attribute and every dataset of a rich fixture damaged in each
// way the reader must refuse, truncations and bit flips at many offsets, forbidden storage, inconsistent shapes,
// size and work bombs, and candidates of every wrong shape and dtype. Attributes and datasets are enumerated from
// the file, so a field added to the schema is covered without editing this list.
#include <hdf5.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>

#include "catalogue.hpp"

namespace attncheck::catalogue {
namespace fs = std::filesystem;
namespace {

const std::string kPlain = "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5";
const std::string kRich = "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_bshd-causal-br-pad-mask-bias-win6_-1-softcap-drop_normal.h5";

Sources g_sources;  // set by make_sources

// The good file a damaged copy of `src` is run with.
fs::path partner_of(const fs::path& src) {
  if (src == g_sources.plain) return g_sources.candidate;
  if (src == g_sources.rich) return g_sources.rich_candidate;
  return g_sources.plain;  // src is the candidate
}

std::string safe(std::string s) {
  for (char& c : s)
    if (c == '/') c = '_';
  return s;
}

// A copy of `src` at dir/<kind>/<name>.h5 (own directory: verify reads whole directories), edited by `edit`.
template <class F>
Case edited(const fs::path& src, const fs::path& dir, const std::string& kind, const std::string& what,
            std::vector<std::string> expect, F edit, bool candidate = false) {
  Case c{kind, kind + "/" + what, {}, candidate, true, std::move(expect), Want::refused, {}};
  const fs::path d = dir / safe(c.name);
  fs::create_directories(d);
  c.file = d / "f.h5";
  fs::copy_file(src, c.file, fs::copy_options::overwrite_existing);
  c.partner = partner_of(src);
  const hid_t f = H5Fopen(c.file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  edit(f);
  H5Fclose(f);
  return c;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

Case with_bytes(const fs::path& dir, const std::string& kind, const std::string& what, const std::string& bytes,
                bool candidate, bool strict, const fs::path& partner) {
  Case c{kind, kind + "/" + what, {}, candidate, true, {}, strict ? Want::refused : Want::any, partner};
  const fs::path d = dir / safe(c.name);
  fs::create_directories(d);
  c.file = d / "f.h5";
  std::ofstream(c.file, std::ios::binary) << bytes;
  return c;
}

void put_attr(hid_t loc, const char* name, hid_t file_type, hid_t mem_type, const std::vector<hsize_t>& dims,
              const void* data) {
  H5Adelete(loc, name);
  const hid_t s = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t a = H5Acreate2(loc, name, file_type, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, mem_type, data);
  H5Aclose(a);
  H5Sclose(s);
}

void put_string(hid_t loc, const char* name, const std::string& v) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, v.size());
  put_attr(loc, name, t, t, {}, v.data());
  H5Tclose(t);
}

void put_i64(hid_t loc, const char* name, int64_t v, std::vector<hsize_t> dims = {}) {
  size_t n = 1;
  for (auto d : dims) n *= d;
  std::vector<int64_t> vals(n, v);
  put_attr(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, dims, vals.data());
}

void put_f64(hid_t loc, const char* name, double v, std::vector<hsize_t> dims = {}) {
  size_t n = 1;
  for (auto d : dims) n *= d;
  std::vector<double> vals(n, v);
  put_attr(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, dims, vals.data());
}

struct AttrInfo {
  std::string name;
  H5T_class_t cls;
  int rank;
};

std::vector<AttrInfo> root_attributes(const fs::path& file) {
  std::vector<AttrInfo> out;
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
  const int n = H5Aget_num_attrs(root);
  for (int i = 0; i < n; ++i) {
    const hid_t a = H5Aopen_idx(root, unsigned(i));
    char buf[256];
    H5Aget_name(a, sizeof buf, buf);
    const hid_t t = H5Aget_type(a), s = H5Aget_space(a);
    out.push_back({buf, H5Tget_class(t), H5Sget_simple_extent_ndims(s)});
    H5Tclose(t);
    H5Sclose(s);
    H5Aclose(a);
  }
  H5Gclose(root);
  H5Fclose(f);
  return out;
}

struct DsetInfo {
  std::string path;
  hid_t type;  // a copy; closed by the caller's process exit (few)
  std::vector<hsize_t> dims;
};

std::vector<DsetInfo> all_datasets(const fs::path& file) {
  std::vector<DsetInfo> out;
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  for (const char* group : {"/inputs", "/expected"}) {
    const hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    hsize_t n = 0;
    H5Gget_num_objs(g, &n);
    for (hsize_t i = 0; i < n; ++i) {
      char buf[256];
      H5Gget_objname_by_idx(g, i, buf, sizeof buf);
      const std::string path = std::string(group) + "/" + buf;
      const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
      const hid_t s = H5Dget_space(d);
      std::vector<hsize_t> dims(size_t(H5Sget_simple_extent_ndims(s)));
      H5Sget_simple_extent_dims(s, dims.data(), nullptr);
      out.push_back({path, H5Tcopy(H5Dget_type(d)), dims});
      H5Sclose(s);
      H5Dclose(d);
    }
    H5Gclose(g);
  }
  H5Fclose(f);
  return out;
}

// Replaces dataset `path` by one of `type` and `dims`, filled with ones (or a fixed-length string).
void replace_dataset(hid_t f, const std::string& path, hid_t type, const std::vector<hsize_t>& dims) {
  H5Ldelete(f, path.c_str(), H5P_DEFAULT);
  const hid_t s = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t d = H5Dcreate2(f, path.c_str(), type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  size_t n = 1;
  for (auto x : dims) n *= x;
  if (H5Tget_class(type) == H5T_STRING) {
    std::string text(n * H5Tget_size(type), 'x');
    H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data());
  } else {
    std::vector<double> ones(n, 1.0);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, ones.data());
  }
  H5Dclose(d);
  H5Sclose(s);
}

// Recreates dataset `path` with its type and shape but the storage `set` puts on its creation properties.
template <class F>
void restore_with(hid_t f, const std::string& path, F set) {
  const hid_t d0 = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  const hid_t t = H5Dget_type(d0), s = H5Dget_space(d0);
  H5Dclose(d0);
  H5Ldelete(f, path.c_str(), H5P_DEFAULT);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  set(dcpl, s);
  H5Dclose(H5Dcreate2(f, path.c_str(), t, s, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  H5Pclose(dcpl);
  H5Tclose(t);
  H5Sclose(s);
}

}  // namespace

Sources make_sources(const fs::path& dir) {
  fs::create_directories(dir / "sources");
  Sources s{dir / "sources" / kPlain, dir / "sources" / kRich, dir / "sources" / "candidate.h5",
            dir / "sources" / "rich_candidate.h5"};
  fs::copy_file(fs::path(GOLDEN_DIR) / "cases" / kPlain, s.plain, fs::copy_options::overwrite_existing);
  fs::copy_file(fs::path(GOLDEN_DIR) / "cases" / kRich, s.rich, fs::copy_options::overwrite_existing);
  // The candidates: each fixture's own expected outputs as /actual (float64 is an accepted candidate dtype).
  for (const auto& [from, to] : {std::pair{s.plain, s.candidate}, std::pair{s.rich, s.rich_candidate}}) {
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
    const hid_t f = H5Fopen(to.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Gclose(H5Gcreate2(f, "/actual", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    for (const char* n : {"out", "lse", "weights"})
      H5Ocopy(f, (std::string("/expected/") + n).c_str(), f, (std::string("/actual/") + n).c_str(), H5P_DEFAULT,
              H5P_DEFAULT);
    H5Fclose(f);
  }
  g_sources = s;
  return s;
}

std::vector<Case> truncations(const Sources& s, const fs::path& dir) {
  std::vector<Case> out;
  for (const auto& [tag, src] : {std::pair{"plain", s.plain}, std::pair{"rich", s.rich}}) {
    const std::string bytes = read_bytes(src);
    std::vector<size_t> at = {0, 1, 7, 8, 47, 95, 511, 2047, bytes.size() - 1};
    for (int k = 1; k <= 36; ++k) at.push_back(bytes.size() * size_t(k) / 37);
    for (size_t n : at)
      out.push_back(with_bytes(dir, "truncation", std::string(tag) + "/at" + std::to_string(n), bytes.substr(0, n),
                               false, true, partner_of(src)));
  }
  return out;
}

std::vector<Case> bit_flips(const Sources& s, const fs::path& dir) {
  std::vector<Case> out;
  const std::string bytes = read_bytes(s.plain);
  // Deterministic offsets: 24 in the first 4 KiB (superblock, object headers, attributes), 16 over the whole file.
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&] { return x = x * 6364136223846793005ull + 1442695040888963407ull, x >> 33; };
  for (int k = 0; k < 40; ++k) {
    const size_t off = k < 24 ? size_t(next() % 4096) : size_t(next() % bytes.size());
    const int bit = int(next() % 8);
    std::string b = bytes;
    b[off] = char(b[off] ^ (1 << bit));
    out.push_back(with_bytes(dir, "bit-flip", "byte" + std::to_string(off) + "-bit" + std::to_string(bit), b, false,
                             false, s.candidate));
  }
  return out;
}

// What a damaged root attribute of the rich fixture must give when it is not "refused" (golden/SCHEMA.md).
Want attribute_want(const std::string& kind, const std::string& a) {
  const bool value_only = kind == "attribute/out-of-range" || kind == "attribute/huge" || kind == "attribute/nan";
  // Provenance: read and shown, never used to judge; any value of the right type and rank is valid.
  for (const char* info :
       {"name", "attncheck_version", "reference_precision", "seed", "distribution", "command", "dropout_seed"})
    if (a == info && value_only) return Want::accepted;
  if (a == "tolerance_model") return Want::accepted;  // documentation for h5py users, never read
  if ((a == "effective_scale" || a == "problem_name") && kind == "attribute/missing")
    return Want::accepted;  // optional cross-checks
  // Unused by this fixture (fill = neg_inf, alignment = bottom_right).
  if ((a == "fill_value" && value_only) || (a == "causal_offset" && kind == "attribute/out-of-range"))
    return Want::accepted;
  if (a == "softcap" && kind == "attribute/huge") return Want::any;  // 1e300 is a valid softcap of another problem
  return Want::refused;
}

std::vector<Case> attributes(const Sources& s, const fs::path& dir) {
  std::vector<Case> out;
  for (const AttrInfo& a : root_attributes(s.rich)) {
    const char* n = a.name.c_str();
    const std::vector<std::string> names{a.name};
    out.push_back(edited(s.rich, dir, "attribute/missing", a.name, names, [&](hid_t f) { H5Adelete(f, n); }));
    if (a.cls == H5T_STRING) {
      out.push_back(edited(s.rich, dir, "attribute/wrong-type", a.name, names, [&](hid_t f) { put_i64(f, n, 7); }));
      out.push_back(edited(s.rich, dir, "attribute/out-of-range", a.name, names,
                           [&](hid_t f) { put_string(f, n, "no-such-value"); }));
      out.push_back(edited(s.rich, dir, "attribute/wrong-rank", a.name, names, [&](hid_t f) {
        const hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, 3);
        put_attr(f, n, t, t, {2}, "abcdef");
        H5Tclose(t);
      }));
      out.push_back(edited(s.rich, dir, "attribute/huge", a.name, names,
                           [&](hid_t f) { put_string(f, n, std::string(70000, 'z')); }));
    } else {
      out.push_back(
          edited(s.rich, dir, "attribute/wrong-type", a.name, names, [&](hid_t f) { put_string(f, n, "7"); }));
      out.push_back(edited(s.rich, dir, "attribute/wrong-rank", a.name, names, [&](hid_t f) {
        if (a.cls == H5T_FLOAT)
          put_f64(f, n, 1.0, a.rank == 0 ? std::vector<hsize_t>{2} : std::vector<hsize_t>{2, 2});
        else
          put_i64(f, n, 1, a.rank == 0 ? std::vector<hsize_t>{2} : std::vector<hsize_t>{2, 2});
      }));
      if (a.cls == H5T_FLOAT) {
        out.push_back(edited(s.rich, dir, "attribute/nan", a.name, names, [&](hid_t f) {
          put_f64(f, n, std::nan(""), a.rank ? std::vector<hsize_t>{4} : std::vector<hsize_t>{});
        }));
        out.push_back(edited(s.rich, dir, "attribute/huge", a.name, names, [&](hid_t f) {
          put_f64(f, n, 1e300, a.rank ? std::vector<hsize_t>{4} : std::vector<hsize_t>{});
        }));
        out.push_back(edited(s.rich, dir, "attribute/out-of-range", a.name, names, [&](hid_t f) {
          put_f64(f, n, -1.5, a.rank ? std::vector<hsize_t>{4} : std::vector<hsize_t>{});
        }));
      } else {
        out.push_back(edited(s.rich, dir, "attribute/out-of-range", a.name, names, [&](hid_t f) {
          put_i64(f, n, -3, a.rank ? std::vector<hsize_t>{4} : std::vector<hsize_t>{});
        }));
        out.push_back(edited(s.rich, dir, "attribute/huge", a.name, names, [&](hid_t f) {
          put_i64(f, n, int64_t{1} << 62, a.rank ? std::vector<hsize_t>{4} : std::vector<hsize_t>{});
        }));
      }
    }
  }
  for (Case& c : out) c.want = attribute_want(c.kind, c.name.substr(c.kind.size() + 1));
  return out;
}

std::vector<Case> datasets(const Sources& s, const fs::path& dir) {
  std::vector<Case> out;
  for (const DsetInfo& d : all_datasets(s.rich)) {
    const std::vector<std::string> names{d.path};
    const std::string& p = d.path;
    // An optional dataset's absence changes the problem (no key_lengths: no padding); problem_name catches it.
    out.push_back(edited(s.rich, dir, "dataset/missing", p, {p, "problem_name"},
                         [&](hid_t f) { H5Ldelete(f, p.c_str(), H5P_DEFAULT); }));
    // Integer datasets (masks, key_lengths) may be any integer width (h5py writes bools and int64): only floats
    // and strings are wrong for them.
    const bool is_float = H5Tget_class(d.type) == H5T_FLOAT;
    out.push_back(edited(s.rich, dir, "dataset/wrong-dtype", p + "/" + (is_float ? "int32" : "float64"), names,
                         [&](hid_t f) { replace_dataset(f, p, is_float ? H5T_STD_I32LE : H5T_IEEE_F64LE, d.dims); }));
    out.push_back(edited(s.rich, dir, "dataset/wrong-dtype", p + "/" + (is_float ? "int8" : "float32"), names,
                         [&](hid_t f) { replace_dataset(f, p, is_float ? H5T_STD_I8LE : H5T_IEEE_F32LE, d.dims); }));
    out.push_back(edited(s.rich, dir, "dataset/wrong-dtype", p + "/string", names, [&](hid_t f) {
      const hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, 4);
      replace_dataset(f, p, t, d.dims);
      H5Tclose(t);
    }));
    std::vector<hsize_t> fewer(d.dims.begin(), d.dims.end() - (d.dims.empty() ? 0 : 1));
    out.push_back(
        edited(s.rich, dir, "dataset/wrong-rank", p, names, [&](hid_t f) { replace_dataset(f, p, d.type, fewer); }));
    std::vector<hsize_t> longer = d.dims;
    if (!longer.empty()) ++longer.back();
    out.push_back(
        edited(s.rich, dir, "dataset/wrong-shape", p, names, [&](hid_t f) { replace_dataset(f, p, d.type, longer); }));
    out.push_back(edited(s.rich, dir, "dataset/scalar", p, names, [&](hid_t f) { replace_dataset(f, p, d.type, {}); }));
    out.push_back(edited(s.rich, dir, "dataset/replaced-by-group", p, names, [&](hid_t f) {
      H5Ldelete(f, p.c_str(), H5P_DEFAULT);
      H5Gclose(H5Gcreate2(f, p.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    }));
  }
  return out;
}

std::vector<Case> shapes_and_bombs(const Sources& s, const fs::path& dir) {
  std::vector<Case> out;
  // Attributes and datasets that disagree: each extent attribute one larger than the datasets.
  for (const char* a : {"B", "Hq", "Hkv", "Lq", "Lk", "Dqk", "Dv"}) {
    const hid_t f0 = H5Fopen(s.plain.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t at = H5Aopen(f0, a, H5P_DEFAULT);
    int64_t v = 0;
    H5Aread(at, H5T_NATIVE_INT64, &v);
    H5Aclose(at);
    H5Fclose(f0);
    out.push_back(edited(s.plain, dir, "inconsistent-shape", std::string(a) + "+1",
                         {"shape must be", "problem", "effective_scale", "mask_shape", "bias_shape"},
                         [&](hid_t f) { put_i64(f, a, v + 1); }));
  }
  out.push_back(edited(s.rich, dir, "inconsistent-shape", "mask_shape", {"/inputs/mask", "mask_shape"},
                       [](hid_t f) { put_i64(f, "mask_shape", 1, {4}); }));
  out.push_back(edited(s.rich, dir, "inconsistent-shape", "bias_shape", {"/inputs/bias", "bias_shape"},
                       [](hid_t f) { put_i64(f, "bias_shape", 1, {4}); }));
  // Size bombs (memory from the attributes) and work bombs (reference FLOPs), refused before any dataset is read.
  out.push_back(
      edited(s.plain, dir, "size-bomb", "Lk=2^40", {"size:"}, [](hid_t f) { put_i64(f, "Lk", int64_t{1} << 40); }));
  out.push_back(edited(s.plain, dir, "size-bomb", "weights-Lq=Lk=2^16", {"size:"}, [](hid_t f) {
    put_i64(f, "Lq", 65536);
    put_i64(f, "Lk", 65536);
  }));
  out.push_back(edited(s.plain, dir, "size-bomb", "B=2^31", {"size:", "problem"},
                       [](hid_t f) { put_i64(f, "B", int64_t{1} << 31); }));
  out.push_back(edited(s.plain, dir, "work-bomb", "Lq=Lk=2^17-no-weights", {"work:"}, [](hid_t f) {
    put_i64(f, "Lq", 131072);
    put_i64(f, "Lk", 131072);
    put_i64(f, "want_weights", 0);
  }));
  out.push_back(edited(s.plain, dir, "work-bomb", "Lq=2^20-Lk=2^12-no-weights", {"work:"}, [](hid_t f) {
    put_i64(f, "Lq", 1 << 20);
    put_i64(f, "Lk", 1 << 12);
    put_i64(f, "want_weights", 0);
  }));
  return out;
}

std::vector<Case> storage(const Sources& s, const fs::path& dir) {
  std::vector<Case> out;
  out.push_back(edited(s.plain, dir, "storage", "soft-link", {"/inputs/k"}, [](hid_t f) {
    H5Ldelete(f, "/inputs/k", H5P_DEFAULT);
    H5Lcreate_soft("/inputs/q", f, "/inputs/k", H5P_DEFAULT, H5P_DEFAULT);
  }));
  out.push_back(edited(s.plain, dir, "storage", "external-link", {"/inputs/k"}, [](hid_t f) {
    H5Ldelete(f, "/inputs/k", H5P_DEFAULT);
    H5Lcreate_external("/etc/other.h5", "/k", f, "/inputs/k", H5P_DEFAULT, H5P_DEFAULT);
  }));
  out.push_back(edited(s.plain, dir, "storage", "soft-link-group", {"/inputs"}, [](hid_t f) {
    H5Lmove(f, "/inputs", f, "/real_inputs", H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_soft("/real_inputs", f, "/inputs", H5P_DEFAULT, H5P_DEFAULT);
  }));
  out.push_back(edited(s.plain, dir, "storage", "external-storage", {"/inputs/q"}, [](hid_t f) {
    restore_with(f, "/inputs/q", [](hid_t dcpl, hid_t) { H5Pset_external(dcpl, "/etc/hostname", 0, H5F_UNLIMITED); });
  }));
  out.push_back(edited(s.plain, dir, "storage", "virtual", {"/inputs/q"}, [](hid_t f) {
    restore_with(f, "/inputs/q", [](hid_t dcpl, hid_t sp) { H5Pset_virtual(dcpl, sp, "/nonexistent.h5", "/q", sp); });
  }));
  out.push_back(edited(s.plain, dir, "storage", "virtual-expected", {"/expected/out"}, [](hid_t f) {
    restore_with(f, "/expected/out",
                 [](hid_t dcpl, hid_t sp) { H5Pset_virtual(dcpl, sp, "/nonexistent.h5", "/o", sp); });
  }));
  out.push_back(edited(s.plain, dir, "storage", "group-is-dataset", {"/inputs"}, [](hid_t f) {
    H5Ldelete(f, "/inputs", H5P_DEFAULT);
    replace_dataset(f, "/inputs", H5T_IEEE_F64LE, {2});
  }));
  // Files that are not regular files, or not there.
  auto special = [&](const std::string& what) {
    Case c{"storage", "storage/" + what, dir / ("special_" + what), false, false, {}, Want::refused, s.candidate};
    fs::create_directories(c.file);
    c.file /= "f.h5";
    return c;
  };
  Case fifo = special("fifo");
  mkfifo(fifo.file.c_str(), 0600);
  out.push_back(fifo);
  Case directory = special("directory");
  fs::create_directories(directory.file);
  out.push_back(directory);
  Case device = special("char-device");
  fs::create_symlink("/dev/zero", device.file);
  out.push_back(device);
  Case missing = special("missing");
  out.push_back(missing);
  out.push_back(with_bytes(dir, "storage", "empty-file", "", false, true, s.candidate));
  out.push_back(with_bytes(dir, "storage", "not-hdf5", "{\"this\": \"is json\"}\n", false, true, s.candidate));
  return out;
}

// Modification parameters broken inside valid modification fixtures (docs/problem-model.md "Modifications"): a
// document id list of the wrong length, ALiBi slopes of the wrong count or not fp32 values, a T5 bucket count the
// table does not match. Each is refused naming the dataset.
std::vector<Case> modifications(const fs::path& dir) {
  std::vector<Case> out;
  fs::create_directories(dir / "sources");
  auto source = [&](const std::string& name) {
    const fs::path p = dir / "sources" / name;
    fs::copy_file(fs::path(GOLDEN_DIR) / "cases" / name, p, fs::copy_options::overwrite_existing);
    return p;
  };
  const fs::path doc = source("fp32_B2-Hq2-Hkv2-Lq7-Lk130-D16_pad-doc_normal_doc-decode.h5");
  const fs::path alibi = source("fp32_B2-Hq4-Hkv2-Lq9-Lk40-D16_causal-br-alibi_normal_alibi-per-batch.h5");
  const fs::path t5 = source("fp32_B2-Hq4-Hkv2-Lq24-Lk40-D16_t5_normal_t5-bidirectional.h5");
  out.push_back(edited(doc, dir, "modification", "doc_ids/short", {"/inputs/doc_ids"},
                       [](hid_t f) { replace_dataset(f, "/inputs/doc_ids", H5T_STD_I64LE, {259}); }));
  out.push_back(edited(alibi, dir, "modification", "alibi_slopes/wrong-count", {"/inputs/alibi_slopes"},
                       [](hid_t f) { replace_dataset(f, "/inputs/alibi_slopes", H5T_IEEE_F64LE, {3}); }));
  out.push_back(edited(alibi, dir, "modification", "alibi_slopes/not-fp32", {"/inputs/alibi_slopes"}, [](hid_t f) {
    const hid_t d = H5Dopen2(f, "/inputs/alibi_slopes", H5P_DEFAULT);
    const std::vector<double> tenth(8, 0.1);  // 0.1 is not an fp32 value
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, tenth.data());
    H5Dclose(d);
  }));
  out.push_back(edited(t5, dir, "modification", "t5_buckets/table-mismatch", {"/inputs/t5_table"},
                       [](hid_t f) { put_i64(f, "t5_buckets", 9); }));
  // Expressions (docs/problem-model.md "Expressions"): malformed, an unknown name, an index out of a tensor's
  // range, a declaration the values do not match, a non-finite mask value; each names the expression's field.
  const fs::path sexpr = source("fp32_B2-Hq4-Hkv2-Lq9-Lk40-D16_causal-br-sexpr_normal_expr-linear-bias.h5");
  const fs::path mexpr = source("fp32_B2-Hq4-Hkv2-Lq24-Lk24-D16_mexpr_poison_masked_expr-doc-causal.h5");
  auto expression = [&](const fs::path& src, const std::string& what, const char* key, const std::string& text) {
    out.push_back(edited(src, dir, "modification", what, {key}, [&](hid_t f) { put_string(f, key, text); }));
  };
  expression(sexpr, "score_expr/malformed", "score_expr", "score + (slopes[h] *");
  expression(sexpr, "score_expr/unknown-name", "score_expr", "score + slope * h");
  expression(sexpr, "score_expr/index-out-of-range", "score_expr", "score + slopes[h + 1]");
  expression(sexpr, "expr_tensors/values-mismatch", "expr_tensors", "slopes[5]");
  expression(mexpr, "mask_expr/non-finite", "mask_expr", "sqrt(kv_idx - 5)");
  // An fp8 output's scale_o of 0, below 0 or NaN: refused naming scale_o.
  const fs::path fp8_out = source("fp32_B2-Hq4-Hkv1-Lq5-Lk17-D16_causal-br-pad-out-e5m2_normal.h5");
  for (const auto& [what, x] : {std::pair{"scale_o/zero", 0.0}, {"scale_o/negative", -2.0}, {"scale_o/nan", NAN}})
    out.push_back(
        edited(fp8_out, dir, "modification", what, {"scale_o"}, [x = x](hid_t f) { put_f64(f, "scale_o", x, {}); }));
  return out;
}

// Quantized KV caches broken inside valid cache fixtures (docs/problem-model.md "Quantized KV cache"): a block
// scale of 0 or NaN, a q4_1 min of NaN, a block size that does not divide the head dims, a 4-bit format with
// another block than its 32, a zero scale in a page slot the block table reads. Each is refused naming the field.
std::vector<Case> kv_caches(const fs::path& dir) {
  std::vector<Case> out;
  fs::create_directories(dir / "sources");
  auto source = [&](const std::string& name) {
    const fs::path p = dir / "sources" / name;
    fs::copy_file(fs::path(GOLDEN_DIR) / "cases" / name, p, fs::copy_options::overwrite_existing);
    return p;
  };
  auto first_element = [](const char* path, double x) {
    return [=](hid_t f) {
      const hid_t d = H5Dopen2(f, path, H5P_DEFAULT), s = H5Dget_space(d);
      std::vector<double> v(static_cast<size_t>(H5Sget_simple_extent_npoints(s)));
      H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      v[0] = x;
      H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      H5Sclose(s);
      H5Dclose(d);
    };
  };
  const fs::path q4_0 = source("fp16_B1-Hq2-Hkv1-Lq1-Lk13-Dqk64-Dv32_causal-br-kv-q4_0-block32-f16s_normal_decode.h5");
  const fs::path q4_1 = source("fp32_B2-Hq2-Hkv1-Lq3-Lk11-D32_bshd-pad-kv-q4_1-block32-f16s_normal.h5");
  const fs::path q8_0 = source("fp32_B2-Hq4-Hkv1-Lq5-Lk37-D64_kv-int8-block32-f16s_normal_q8_0.h5");
  out.push_back(
      edited(q4_0, dir, "kv-cache", "k_scale/zero", {"k_scale[0,0,0,0]"}, first_element("/inputs/k_scale", 0)));
  out.push_back(
      edited(q4_0, dir, "kv-cache", "k_scale/nan", {"k_scale[0,0,0,0]"}, first_element("/inputs/k_scale", NAN)));
  out.push_back(
      edited(q4_1, dir, "kv-cache", "v_scale/zero", {"v_scale[0,0,0,0]"}, first_element("/inputs/v_scale", 0)));
  out.push_back(edited(q4_1, dir, "kv-cache", "k_min/nan", {"k_min[0,0,0,0]"}, first_element("/inputs/k_min", NAN)));
  out.push_back(
      edited(q4_0, dir, "kv-cache", "kv_block/not-32", {"kv_block"}, [](hid_t f) { put_i64(f, "kv_block", 16); }));
  out.push_back(edited(q8_0, dir, "kv-cache", "kv_block/not-dividing", {"kv_block must divide Dqk"},
                       [](hid_t f) { put_i64(f, "kv_block", 24); }));
  // A paged cache's per-token scales are [num_pages, Hkv, page_size, 1]: slot 0 of page 0 holds batch 0's key 10.
  const fs::path paged =
      source("fp16_B2-Hq4-Hkv2-Lq1-Lk17-D64_causal-br-pad-paged5-kv-e4m3-token_normal_decode-shared.h5");
  out.push_back(
      edited(paged, dir, "kv-cache", "k_scale/paged-zero", {"k_scale[0,0,0,0]"}, first_element("/inputs/k_scale", 0)));
  return out;
}

std::vector<Case> candidates(const Sources& s, const fs::path& dir) {
  std::vector<Case> out;
  auto cand = [&](const std::string& what, std::vector<std::string> expect, auto edit) {
    out.push_back(edited(s.candidate, dir, "candidate", what, std::move(expect), edit, true));
  };
  cand("out-missing", {"/actual/out"}, [](hid_t f) { H5Ldelete(f, "/actual/out", H5P_DEFAULT); });
  cand("actual-missing", {"/actual"}, [](hid_t f) { H5Ldelete(f, "/actual", H5P_DEFAULT); });
  const std::vector<hsize_t> out_dims{2, 4, 13, 16};
  for (size_t k = 0; k < 4; ++k) {
    std::vector<hsize_t> d = out_dims;
    ++d[k];
    cand("out-shape-dim" + std::to_string(k), {"/actual/out"},
         [d](hid_t f) { replace_dataset(f, "/actual/out", H5T_IEEE_F64LE, d); });
  }
  cand("out-rank3", {"/actual/out"}, [](hid_t f) { replace_dataset(f, "/actual/out", H5T_IEEE_F64LE, {2, 4, 13}); });
  cand("out-scalar", {"/actual/out"}, [](hid_t f) { replace_dataset(f, "/actual/out", H5T_IEEE_F64LE, {}); });
  for (const auto& [tag, type] :
       {std::pair{"int32", H5T_STD_I32LE}, std::pair{"uint8", H5T_STD_U8LE}, std::pair{"int16", H5T_STD_I16LE},
        std::pair{"uint16-no-encoding", H5T_STD_U16LE}, std::pair{"int64", H5T_STD_I64LE}}) {
    const hid_t t = type;
    cand(std::string("out-dtype-") + tag, {"/actual/out"},
         [t, out_dims](hid_t f) { replace_dataset(f, "/actual/out", t, out_dims); });
  }
  cand("out-dtype-string", {"/actual/out"}, [out_dims](hid_t f) {
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 2);
    replace_dataset(f, "/actual/out", t, out_dims);
    H5Tclose(t);
  });
  cand("lse-shape", {"/actual/lse"}, [](hid_t f) { replace_dataset(f, "/actual/lse", H5T_IEEE_F64LE, {2, 4, 14}); });
  cand("lse-dtype", {"/actual/lse"}, [](hid_t f) { replace_dataset(f, "/actual/lse", H5T_STD_I32LE, {2, 4, 13}); });
  cand("weights-shape", {"/actual/weights"}, [](hid_t f) {
    replace_dataset(f, "/actual/weights", H5T_IEEE_F64LE, {2, 4, 13, 18});
  });
  cand("weights-rank", {"/actual/weights"}, [](hid_t f) {
    replace_dataset(f, "/actual/weights", H5T_IEEE_F64LE, {2, 4, 13});
  });
  cand("out-soft-link", {"/actual/out"}, [](hid_t f) {
    H5Ldelete(f, "/actual/out", H5P_DEFAULT);
    H5Lcreate_soft("/expected/out", f, "/actual/out", H5P_DEFAULT, H5P_DEFAULT);
  });
  cand("out-external-link", {"/actual/out"}, [](hid_t f) {
    H5Ldelete(f, "/actual/out", H5P_DEFAULT);
    H5Lcreate_external("/etc/other.h5", "/o", f, "/actual/out", H5P_DEFAULT, H5P_DEFAULT);
  });
  cand("out-external-storage", {"/actual/out"}, [](hid_t f) {
    restore_with(f, "/actual/out", [](hid_t dcpl, hid_t) { H5Pset_external(dcpl, "/etc/hostname", 0, H5F_UNLIMITED); });
  });
  cand("out-virtual", {"/actual/out"}, [](hid_t f) {
    restore_with(f, "/actual/out", [](hid_t dcpl, hid_t sp) { H5Pset_virtual(dcpl, sp, "/nonexistent.h5", "/o", sp); });
  });
  const std::string bytes = read_bytes(s.candidate);
  for (int k = 1; k <= 8; ++k)
    out.push_back(with_bytes(dir, "candidate", "truncated-at" + std::to_string(bytes.size() * size_t(k) / 9),
                             bytes.substr(0, bytes.size() * size_t(k) / 9), true, true, s.plain));
  out.push_back(with_bytes(dir, "candidate", "not-hdf5", "not an hdf5 file\n", true, true, s.plain));
  return out;
}

}  // namespace attncheck::catalogue
