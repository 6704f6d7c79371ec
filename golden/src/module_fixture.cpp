// Module fixture I/O (module_fixture.hpp, golden/SCHEMA.md "Module fixtures"). The attention's own fields are the
// attention fixture's attributes, in the group /attention; the module's are root attributes. Every shape is read
// as stored and then checked by validate(ModuleProblem, ModuleInputs), so a weight that does not chain is named.
#include "attncheck/module_fixture.hpp"

#include <algorithm>
#include <filesystem>

#include "attncheck/budget.hpp"
#include "attncheck/durable_file.hpp"
#include "attncheck/module_reference.hpp"
#include "fixture_attrs.hpp"
#include "h5.hpp"
#include "h5_ints.hpp"
#include "untrusted.hpp"

namespace attncheck {

namespace {

constexpr double kMaxElements = double(1 << 26);  // per tensor: module fixtures are small by design

std::string image(const std::string& path, const ModuleFixture& f) {
  const ModuleProblem& m = f.problem;
  const Problem& p = m.attn;
  const ModuleInputs& in = f.inputs;
  h5::MemoryFile mem(path);
  const hid_t file = mem.id();
  {
    h5::Id root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose);
    h5::write_attr(root, "schema_version", f.provenance.schema_version);
    h5::write_attr(root, "kind", std::string("module"));
    h5::write_attr(root, "name", f.name);
    fixture_detail::write_provenance(root, f.provenance);
    h5::write_attr(root, "d_in", m.d_in);
    h5::write_attr(root, "d_in2", m.d_in2);
    h5::write_attr(root, "d_out", m.d_out);
    h5::write_attr(root, "d_model", p.Hq * p.Dqk);
    h5::write_attr(root, "d_value", p.Hq * p.Dv);
    h5::write_attr(root, "packing", std::string(to_string(m.packing)));
    h5::write_attr(root, "qkv_bias", int64_t{m.qkv_bias});
    h5::write_attr(root, "out_bias", int64_t{m.out_bias});
    h5::write_attr(root, "average_weights", int64_t{m.average_weights});
    if (f.grad) h5::write_attr(root, "gradients", int64_t{1});
    h5::Id a = h5::create_group(file, "attention");
    fixture_detail::write_problem_attrs(a, p);
  }
  {
    h5::Id g = h5::create_group(file, "inputs");
    h5::write_tensor(g, "x", in.x, in.x.shape, "B,Lq,d_in");
    if (in.x2) h5::write_tensor(g, "x2", *in.x2, in.x2->shape, "B,Lk,d_in2");
    for (const ModuleProjection& w : kModuleProjections)
      if (const std::optional<Tensor>& t = in.*w.tensor)
        h5::write_tensor(g, w.name, *t, t->shape, w.rank == 2 ? "out,in" : "out");
    h5::write_tensor(g, "wo", in.wo, in.wo.shape, "d_out,Hq*Dv");
    if (in.bo) h5::write_tensor(g, "bo", *in.bo, in.bo->shape, "d_out");
    if (in.mask) h5::write_tensor(g, "mask", *in.mask, in.mask->shape, "B,Hq,Lq,Lk (broadcast)");
    if (in.bias) h5::write_tensor(g, "bias", *in.bias, in.bias->shape, "B,Hq,Lq,Lk (broadcast)");
    if (in.keep) h5::write_tensor(g, "keep", *in.keep, in.keep->shape, "B,Hq,Lq,Lk");
    fixture_detail::write_problem_datasets(g, p);
    if (f.grad) h5::write_tensor(g, "dy", *f.dy, f.dy->shape, "B,Lq,d_out");
  }
  {
    h5::Id g = h5::create_group(file, "expected");
    h5::write_doubles(g, "y", f.expected.y, {p.B, p.Lq, m.d_out}, "B,Lq,d_out");
    if (p.want_weights) {
      if (m.average_weights)
        h5::write_doubles(g, "weights", f.expected.weights, {p.B, p.Lq, p.Lk}, "B,Lq,Lk (mean over heads)");
      else
        h5::write_doubles(g, "weights", f.expected.weights, {p.B, p.Hq, p.Lq, p.Lk}, "B,Hq,Lq,Lk");
    }
    if (f.grad)  // each gradient shaped like the input it names
      for (const std::string& name : module_grad_names(m))
        h5::write_doubles(g, name.c_str(), module_grad(*f.grad, name), module_grad_input(in, name).shape,
                          "d(sum(dy*y))/d " + name.substr(1));
  }
  return mem.close();
}

// A dataset read with its stored extents (rank `rank`, every extent >= 1, bounded), in dtype t.
Tensor read_any(const h5::Reader& r, hid_t file, const std::string& path, DType t, size_t rank) {
  h5::Id d = r.open_dataset(file, path);
  const std::vector<int64_t> ext = r.extents(d, path);
  if (ext.size() != rank) r.fail(path, "rank " + std::to_string(ext.size()) + ", expected " + std::to_string(rank));
  double n = 1;
  for (int64_t e : ext) n *= double(e);
  if (n > kMaxElements) r.fail(path, "holds " + std::to_string(n) + " elements, more than a module fixture may");
  Tensor out(t, ext);
  if (t == DType::u8) {
    const std::vector<int64_t> v = h5::read_integers(r, d, path, out.bytes.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] != 0 && v[i] != 1) r.fail(path, "values must be 0 or 1, got " + std::to_string(v[i]));
      out.bytes[i] = static_cast<uint8_t>(v[i]);
    }
    return out;
  }
  r.expect_dtype(d, path, t);
  r.read_raw(d, path, t, out.bytes.data());
  return out;
}

std::optional<Tensor> read_opt(const h5::Reader& r, hid_t file, const char* name, DType t, size_t rank) {
  const std::string path = std::string("/inputs/") + name;
  if (!r.has_object(file, path)) return std::nullopt;
  return read_any(r, file, path, t, rank);
}

bool flag(const h5::Reader& r, hid_t root, const char* name) {
  const int64_t v = r.attr_i64(root, "/", name);
  if (v != 0 && v != 1) r.fail(name, "must be 0 or 1, got " + std::to_string(v));
  return v == 1;
}

ModuleFixture read(const std::string& path) {
  h5::QuietErrors quiet;
  h5::Reader r{path};
  h5::Id file = r.open_file();
  h5::Id root = r.open_group(file, "/");
  ModuleFixture f;
  Provenance& pv = f.provenance;
  pv.schema_version = r.attr_i64(root, "/", "schema_version");
  if (pv.schema_version != kFixtureSchemaVersion)
    r.fail("schema_version", "module fixtures are schema_version " + std::to_string(kFixtureSchemaVersion) + ", got " +
                                 std::to_string(pv.schema_version));
  if (r.attr_str(root, "/", "kind") != "module") r.fail("kind", "is not 'module'");
  f.name = r.attr_str(root, "/", "name");
  fixture_detail::read_provenance(r, root, pv);
  ModuleProblem& m = f.problem;
  {
    h5::Id a = r.open_group(file, "/attention");
    fixture_detail::read_problem_attrs(r, a, m.attn);
  }
  fixture_detail::read_problem_datasets(r, file, m.attn);
  const Problem& p = m.attn;
  m.d_in = r.attr_i64(root, "/", "d_in");
  m.d_in2 = r.attr_i64(root, "/", "d_in2");
  m.d_out = r.attr_i64(root, "/", "d_out");
  const int64_t d_model = r.attr_i64(root, "/", "d_model"), d_value = r.attr_i64(root, "/", "d_value");
  for (auto [name, total, per_head] : {std::tuple{"d_model", d_model, p.Dqk}, std::tuple{"d_value", d_value, p.Dv}}) {
    if (p.Hq < 1 || total % p.Hq != 0)
      r.fail(name, "is " + std::to_string(total) + ", not divisible by the heads Hq=" + std::to_string(p.Hq));
    if (total / p.Hq != per_head)
      r.fail(name, "is " + std::to_string(total) + " = Hq*" + std::to_string(total / p.Hq) +
                       ", but the attention's head dim is " + std::to_string(per_head));
  }
  m.packing = packing_from_string(r.attr_str(root, "/", "packing"));
  m.qkv_bias = flag(r, root, "qkv_bias");
  m.out_bias = flag(r, root, "out_bias");
  m.average_weights = flag(r, root, "average_weights");
  try {
    validate(m);
  } catch (const std::invalid_argument& e) {
    r.fail("problem", e.what());
  }
  check_work(p, false, budget().max_flops);  // the attention inside, as for attention fixtures ("work: ...")
  const DType t = p.dtype;
  ModuleInputs& in = f.inputs;
  in.x = read_any(r, file, "/inputs/x", t, 3);
  in.x2 = read_opt(r, file, "x2", t, 3);
  for (const ModuleProjection& w : kModuleProjections) in.*w.tensor = read_opt(r, file, w.name, t, w.rank);
  in.wo = read_any(r, file, "/inputs/wo", t, 2);
  in.bo = read_opt(r, file, "bo", t, 1);
  in.mask = read_opt(r, file, "mask", DType::u8, 4);
  in.bias = read_opt(r, file, "bias", p.bias_dtype, 4);
  in.keep = read_opt(r, file, "keep", DType::u8, 4);
  try {
    validate(m, in);
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    r.fail("/inputs/" + msg.substr(0, msg.find(':')), msg);
  }
  auto doubles = [&](const char* path, const std::vector<int64_t>& dims) {
    h5::Id d = r.open_dataset(file, path);
    r.expect_dtype(d, path, DType::f64);
    r.expect_extents(d, path, dims);
    size_t n = 1;
    for (int64_t x : dims) n *= static_cast<size_t>(x);
    return r.read_as_double(d, path, n);
  };
  f.expected.y = doubles("/expected/y", {p.B, p.Lq, m.d_out});
  if (p.want_weights)
    f.expected.weights = m.average_weights ? doubles("/expected/weights", {p.B, p.Lq, p.Lk})
                                           : doubles("/expected/weights", {p.B, p.Hq, p.Lq, p.Lk});
  if (r.has_attr(root, "gradients") && flag(r, root, "gradients")) {
    f.dy = read_any(r, file, "/inputs/dy", t, 3);
    if (f.dy->shape != std::vector<int64_t>{p.B, p.Lq, m.d_out})
      r.fail("/inputs/dy",
             "shape " + shape_string(f.dy->shape) + ", expected [B,Lq,d_out] = " + shape_string({p.B, p.Lq, m.d_out}));
    f.grad.emplace();
    for (const std::string& name : module_grad_names(m))
      module_grad(*f.grad, name) = doubles(("/expected/" + name).c_str(), module_grad_input(in, name).shape);
  }
  return f;
}

}  // namespace

ModuleFixture make_module_fixture(std::string name, const ModuleProblem& m, ModuleInputs in, Provenance prov) {
  ModuleFixture f;
  f.name = std::move(name);
  f.problem = m;
  f.expected = reference_module(m, in);
  f.inputs = std::move(in);
  f.provenance = std::move(prov);
  return f;
}

void add_module_gradients(ModuleFixture& f, Tensor dy) {
  f.grad = reference_module_backward(f.problem, f.inputs, dy.to_double());
  f.dy = std::move(dy);
}

std::string module_fixture_image(const std::string& path, const ModuleFixture& f) {
  validate(f.problem, f.inputs);
  h5::QuietErrors quiet;
  return image(path, f);
}

void write_module_fixture(const std::string& path, const ModuleFixture& f) {
  write_file_durably(path, module_fixture_image(path, f));
}

namespace {
bool kind_is_module(const std::string& path) {
  h5::QuietErrors quiet;
  h5::Reader r{path};
  h5::Id file = r.open_file();
  h5::Id root = r.open_group(file, "/");
  return r.has_attr(root, "kind") && r.attr_str(root, "/", "kind") == "module";
}

ModuleFixture read_prefixed(const std::string& path) {
  try {
    return read(path);
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    if (msg.rfind(path + ": ", 0) == 0) throw;
    throw std::invalid_argument(path + ": " + msg);
  }
}
}  // namespace

ModuleFixture read_module_fixture(const std::string& path) {
  return h5::untrusted_read(path, "module", [&] { return read_prefixed(path); });
}

std::vector<ModuleFixture> read_module_fixture_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw std::invalid_argument("--fixtures: '" + dir + "' is not a directory");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".h5") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<ModuleFixture> fixtures;
  for (const auto& f : files) fixtures.push_back(read_module_fixture(f));
  if (fixtures.empty()) throw std::invalid_argument("--fixtures: no module fixtures under '" + dir + "'");
  return fixtures;
}

bool is_module_fixture(const std::string& path) {
  try {
    return h5::untrusted_read(path, "module-kind", [&] { return kind_is_module(path); });
  } catch (const std::exception&) {
    return false;
  }
}

void prepare_module_reads(const std::vector<std::string>& paths) {
  std::vector<h5::FileImage> images;
  for (const std::string& p : paths)
    if (std::optional<h5::FileImage> img = h5::load_image(p)) images.push_back(std::move(*img));
  std::vector<const h5::FileImage*> all, modules;
  for (const auto& img : images) all.push_back(&img);
  // One child for every file's kind, then one for the module fixtures' full reads (vet_in_child keeps outcomes).
  h5::vet_in_child(all, "module-kind", [](const h5::FileImage& img) { (void)kind_is_module(img.path); });
  for (const auto* img : all)
    if (is_module_fixture(img->path)) modules.push_back(img);
  if (!modules.empty())
    h5::vet_in_child(modules, "module", [](const h5::FileImage& img) { (void)read_prefixed(img.path); });
}

}  // namespace attncheck
