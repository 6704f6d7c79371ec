// Gradients in fixtures (golden/SCHEMA.md "Gradients"): dO generated from the case seed, the reference gradients
// and their error scales written beside the forward's datasets (which stay byte-identical), read back with every
// extent checked, and a candidate's /actual/dq, dk, dv, dbias.
#include <filesystem>
#include <stdexcept>
#include <unistd.h>

#include "attncheck/fixture_gradients.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/rng.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/rope.hpp"
#include "fixture_grad.hpp"
#include "fixture_layout.hpp"
#include "untrusted.hpp"

namespace attncheck {

using fixture_detail::stored_dims;
using fixture_detail::to_layout;

namespace {

// One gradient-shaped tensor: which input it belongs to, its logical extents, and whether it follows the layout.
struct GradSlot {
  const char* name;
  std::vector<int64_t> logical;
  bool layout;  // dq, dk, dv: stored in the layout's order; dbias: row-major in bias_shape
  const char* dims;
};

std::vector<GradSlot> slots(const Problem& p) {
  const bool bhsd = p.layout == Layout::BHSD;
  std::vector<GradSlot> s = {{"dq", grad_shape(p, 0), true, bhsd ? "B,Hq,Lq,Dqk" : "B,Lq,Hq,Dqk"},
                             {"dk", grad_shape(p, 1), true, bhsd ? "B,Hkv,Lk,Dqk" : "B,Lk,Hkv,Dqk"},
                             {"dv", grad_shape(p, 2), true, bhsd ? "B,Hkv,Lk,Dv" : "B,Lk,Hkv,Dv"}};
  if (p.bias_shape) s.push_back({"dbias", grad_shape(p, 3), false, "B,Hq,Lq,Lk (bias_shape)"});
  return s;
}

std::vector<double> stored(const std::vector<double>& x, const GradSlot& s, Layout l, bool inverse = false) {
  if (!s.layout) return x;
  return to_layout(x, s.logical[0], s.logical[1], s.logical[2], s.logical[3], l, inverse);
}

std::vector<int64_t> stored_extents(const GradSlot& s, Layout l) {
  return s.layout ? stored_dims(s.logical, l) : s.logical;
}

void write_f64(hid_t g, const std::string& name, const std::vector<double>& v, const std::vector<int64_t>& dims,
               const char* dim_names) {
  h5::write_dataset(g, name.c_str(), H5T_NATIVE_DOUBLE, dims, v.data());
  h5::Id d(H5Dopen2(g, name.c_str(), H5P_DEFAULT), H5Dclose);
  h5::write_attr(d, "dims", std::string(dim_names));
}

// The expected gradient of a slot and its error scales (the *_abs sums; the unchained ones only with a logit
// stage, mods.hpp).
struct SlotData {
  std::vector<double>*value, *abs, *unchained;
};
SlotData data_of(ExpectedGradients& r, const std::string& name) {
  if (name == "dq") return {&r.dq, &r.dq_abs, &r.dq_abs_unchained};
  if (name == "dk") return {&r.dk, &r.dk_abs, &r.dk_abs_unchained};
  if (name == "dv") return {&r.dv, &r.dv_abs, nullptr};
  return {&r.dbias, &r.dbias_abs, nullptr};
}

size_t numel(const std::vector<int64_t>& d) {
  size_t n = 1;
  for (int64_t x : d) n *= static_cast<size_t>(x);
  return n;
}

std::vector<double> read_f64(const h5::Reader& r, hid_t file, const std::string& path,
                             const std::vector<int64_t>& dims) {
  h5::Id d = r.open_dataset(file, path);
  r.expect_dtype(d, path, DType::f64);
  r.expect_extents(d, path, dims);
  return r.read_as_double(d, path, numel(dims));
}

}  // namespace

Tensor generate_dout(const Problem& p, uint64_t seed) {
  Rng r = Rng(seed).split(16);  // streams 1-5 are q, k, v, mask, bias (generate.cpp)
  Tensor t = make_dout(p);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d) t.put(b, h, i, d, r.normal());
  return t;
}

void add_gradients(Fixture& f, uint64_t seed) {
  f.dout = generate_dout(f.problem, seed);
  f.grad = expected_gradients(f.problem, f.inputs, *f.dout);
  f.has_gradients = true;
}

namespace fixture_detail {

void write_gradients_attr(hid_t root, const Fixture& f) {
  if (f.has_gradients) h5::write_attr(root, "gradients", int64_t{1});  // absent: a forward-only fixture (unchanged)
}

void write_gradient_inputs(hid_t inputs, const Fixture& f) {
  if (!f.has_gradients) return;
  const Problem& p = f.problem;
  const Tensor& t = *f.dout;  // make_dout: dense in the layout's storage order
  h5::Id type = h5::file_type(t.dtype);
  h5::write_dataset(inputs, "dout", type, stored_dims(t.shape, p.layout), t.bytes.data());
  h5::Id d(H5Dopen2(inputs, "dout", H5P_DEFAULT), H5Dclose);
  h5::write_attr(d, "dims", std::string(p.layout == Layout::BHSD ? "B,Hq,Lq,Dv" : "B,Lq,Hq,Dv"));
  if (const char* e = h5::encoding(t.dtype)) h5::write_attr(d, "encoding", std::string(e));
}

void write_gradient_expected(hid_t expected, const Fixture& f) {
  if (!f.has_gradients) return;
  const Problem& p = f.problem;
  ExpectedGradients r = *f.grad;
  for (const GradSlot& s : slots(p)) {
    const SlotData x = data_of(r, s.name);
    const std::vector<int64_t> dims = stored_extents(s, p.layout);
    write_f64(expected, s.name, stored(*x.value, s, p.layout), dims, s.dims);
    write_f64(expected, std::string(s.name) + "_abs", stored(*x.abs, s, p.layout), dims, s.dims);
    if (x.unchained && uses_logit_modifications(p))
      write_f64(expected, std::string(s.name) + "_abs_unchained", stored(*x.unchained, s, p.layout), dims, s.dims);
  }
}

void read_gradients(const h5::Reader& r, hid_t file, Fixture& f, bool data, uint64_t cap) {
  h5::Id root = r.open_group(file, "/");
  const int64_t flag = r.has_attr(root, "gradients") ? r.attr_i64(root, "/", "gradients") : 0;
  if (flag != 0 && flag != 1) r.fail("gradients", "must be 0 or 1, got " + std::to_string(flag));
  f.has_gradients = flag == 1;
  if (!f.has_gradients) {
    for (const char* path : {"/inputs/dout", "/expected/dq"})
      if (data && r.has_object(file, path)) r.fail(path, "present but not declared by attribute gradients");
    return;
  }
  if (!data) return;
  const Problem& p = f.problem;
  double bytes = fixture_memory_bytes(p) +
                 double(p.B) * double(p.Hq) * double(p.Lq) * double(p.Dv) * double(dtype_size(p.dtype));  // dout
  for (const GradSlot& s : slots(p)) bytes += 8.0 * 3.0 * double(numel(s.logical));
  if (bytes > double(cap))
    r.fail("size", "the tensors with gradients need " + std::to_string(bytes) + " bytes, " + over_memory_budget(cap));
  {
    const std::string path = "/inputs/dout";
    h5::Id d = r.open_dataset(file, path);
    r.expect_dtype(d, path, p.dtype);
    Tensor t = make_dout(p);
    r.expect_extents(d, path, stored_dims(t.shape, p.layout));
    r.read_raw(d, path, p.dtype, t.bytes.data());
    f.dout = std::move(t);
  }
  ExpectedGradients g;
  for (const GradSlot& s : slots(p)) {
    const SlotData x = data_of(g, s.name);
    const std::vector<int64_t> dims = stored_extents(s, p.layout);
    const std::string base = std::string("/expected/") + s.name;
    *x.value = stored(read_f64(r, file, base, dims), s, p.layout, true);
    *x.abs = stored(read_f64(r, file, base + "_abs", dims), s, p.layout, true);
    if (x.unchained && uses_logit_modifications(p))
      *x.unchained = stored(read_f64(r, file, base + "_abs_unchained", dims), s, p.layout, true);
  }
  // The RoPE angle sensitivities and the score modifications' curvature: from the stored inputs, not stored (the
  // reading child leaves them to the parent).
  if ((uses_rope(p) || ModSet(p).has_score()) && !h5::in_reading_child()) {
    ExpectedGradients x = expected_gradients(p, f.inputs, *f.dout);
    g.dq_rope = std::move(x.dq_rope);
    g.dk_rope = std::move(x.dk_rope);
    g.mod_curv = std::move(x.mod_curv);
  }
  f.grad = std::move(g);
}

}  // namespace fixture_detail

std::optional<Gradients> read_candidate_gradients(const std::string& path, const Problem& p,
                                                  const FixtureReadOptions& options) {
  if (std::filesystem::path(path).extension() == ".npz") return std::nullopt;  // refused by read_candidate_npz
  return h5::untrusted_read(path, "", [&]() -> std::optional<Gradients> {
    h5::QuietErrors quiet;
    try {
      const h5::Reader r{path};
      h5::Id file = r.open_file();
      if (!r.has_object(file, "/actual/dq")) return std::nullopt;
      double need = 0;
      for (const GradSlot& s : slots(p)) need += 16.0 * double(numel(s.logical));
      if (need > double(options.max_bytes))
        r.fail("size",
               "candidate gradients need " + std::to_string(need) + " bytes, " + over_memory_budget(options.max_bytes));
      Gradients g = make_gradients(p);
      for (const GradSlot& s : slots(p)) {
        const std::string where = std::string("/actual/") + s.name;
        if (!r.has_object(file, where))
          r.fail(where, "missing (a candidate with /actual/dq gives dq, dk, dv" +
                            std::string(p.bias_shape ? " and dbias)" : ")"));
        h5::Id d = r.open_dataset(file, where);
        r.expect_extents(d, where, stored_extents(s, p.layout));
        const std::string type = r.type_name(d);
        const DType dt = type == "16-bit float"              ? DType::f16
                         : type == "unsigned 16-bit integer" ? DType::bf16
                         : type == "32-bit float"            ? DType::f32
                                                             : DType::f64;
        Tensor t = s.layout ? Tensor(dt, s.logical, storage_order(p.layout)) : Tensor(dt, s.logical);
        const std::vector<double> v = r.read_as_double(d, where, numel(s.logical));
        for (size_t n = 0; n < v.size(); ++n) t.set_offset(static_cast<int64_t>(n), v[n]);  // storage order, exact
        if (std::string(s.name) == "dq")
          g.dq = std::move(t);
        else if (std::string(s.name) == "dk")
          g.dk = std::move(t);
        else if (std::string(s.name) == "dv")
          g.dv = std::move(t);
        else
          g.dbias = std::move(t);
      }
      return g;
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      if (msg.rfind(path + ": ", 0) == 0) throw;
      throw std::invalid_argument(path + ": " + msg);
    }
  });
}

void write_candidate_gradients(const std::string& path, const Problem& p, const Outputs& out, const Gradients& g) {
  write_candidate(path, p, out);
  h5::QuietErrors quiet;
  h5::Id file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  if (file.get() < 0) throw std::invalid_argument(path + ": cannot reopen the candidate to add gradients");
  h5::Id grp(H5Gopen2(file, "/actual", H5P_DEFAULT), H5Gclose);
  const Tensor* t[] = {&g.dq, &g.dk, &g.dv, g.dbias ? &*g.dbias : nullptr};
  size_t k = 0;
  for (const GradSlot& s : slots(p)) {
    const Tensor& x = *t[k++];
    write_f64(grp, s.name, stored(x.to_double(), s, p.layout), stored_extents(s, p.layout), s.dims);
  }
}

}  // namespace attncheck
