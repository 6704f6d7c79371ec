// Merge fixtures on disk (golden/SCHEMA.md "Merge fixtures"): attributes for the problem and provenance, /inputs as
// a merge kernel receives them, /expected the fp64 merge in the declared conventions (for readers without
// attncheck; verify recomputes it and refuses a file whose stored expectation disagrees).
#include <cmath>
#include <limits>
#include <stdexcept>

#include "attncheck/durable_file.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/state_fixture.hpp"
#include "h5.hpp"
#include "untrusted.hpp"

namespace attncheck {

namespace {

constexpr const char* kKind = "merge";

std::vector<int64_t> stored_stat_dims(const MergeProblem& p, bool stacked) {
  const bool blh = p.conv.layout == StatLayout::blh;
  std::vector<int64_t> d = blh ? std::vector<int64_t>{p.B, p.L, p.H} : std::vector<int64_t>{p.B, p.H, p.L};
  if (stacked) d.insert(d.begin(), p.N);
  return d;
}
std::string stat_dim_names(const MergeProblem& p, bool stacked) {
  return std::string(stacked ? "N," : "") + (p.conv.layout == StatLayout::blh ? "B,L,H" : "B,H,L");
}
// O in its declared memory order: [N,]B,H,L,D or, token-major, [N,]B,L,H,D.
std::vector<int64_t> stored_o_dims(const MergeProblem& p, bool stacked) {
  const bool blhd = p.conv.o_layout == OutLayout::blhd;
  std::vector<int64_t> d = blhd ? std::vector<int64_t>{p.B, p.L, p.H, p.D} : std::vector<int64_t>{p.B, p.H, p.L, p.D};
  if (stacked) d.insert(d.begin(), p.N);
  return d;
}
std::string o_dim_names(const MergeProblem& p, bool stacked) {
  return std::string(stacked ? "N," : "") + (p.conv.o_layout == OutLayout::blhd ? "B,L,H,D" : "B,H,L,D");
}

// The expected merged state in the stored conventions, in fp64: o (normalised O or unnormalised u) and the stats.
struct ExpectedStored {
  std::vector<double> o, s1, s2;  // s1: lse (or max), s2: sum; each in its declared memory order
};
ExpectedStored expected_stored(const MergeProblem& p, const StoredStates& in, const State& m) {
  const std::vector<double> mx = merged_exponent(p, in);  // unnormalised: the stored max, exact
  StoredStates wide = make_merge_outputs(p);  // an fp32 frame only for its strides; values kept in double below
  ExpectedStored e;
  e.o.assign(static_cast<size_t>(m.rows() * p.D), 0.0);
  e.s1.assign(static_cast<size_t>(m.rows()), 0.0);
  if (p.conv.form == StateForm::unnormalised) e.s2.assign(static_cast<size_t>(m.rows()), 0.0);
  const double k = p.conv.base == LseBase::two ? 1.4426950408889634073599246810018921 : 1.0;
  const double sentinel = empty_stat_value(p.conv);
  const Tensor& st = p.conv.form == StateForm::normalised ? *wide.lse : *wide.max;
  for (int64_t r = 0; r < m.rows(); ++r) {
    const int64_t idx[3] = {r / (p.L * p.H), (r / p.L) % p.H, r % p.L};
    const size_t at = static_cast<size_t>(st.offset(idx));
    const bool norm = p.conv.form == StateForm::normalised;
    e.s1[at] = m.empty(r) ? sentinel : norm ? k * m.lse(r) : mx[static_cast<size_t>(r)];
    if (!norm) e.s2[at] = m.l[r];
    for (int64_t d = 0; d < p.D; ++d) {
      const int64_t od[4] = {idx[0], idx[1], idx[2], d};
      e.o[static_cast<size_t>(wide.o.offset(od))] = norm ? m.out(r, d) : m.u[r * p.D + d];
    }
  }
  return e;
}

Tensor read_tensor(const h5::Reader& r, hid_t file, const std::string& path, Tensor t,
                   const std::vector<int64_t>& dims) {
  h5::Id d = r.open_dataset(file, path);
  r.expect_extents(d, path, dims);
  r.expect_dtype(d, path, t.dtype);
  r.read_raw(d, path, t.dtype, t.bytes.data());
  return t;
}
std::vector<double> read_doubles(const h5::Reader& r, hid_t file, const std::string& path,
                                 const std::vector<int64_t>& dims) {
  h5::Id d = r.open_dataset(file, path);
  r.expect_extents(d, path, dims);
  size_t n = 1;
  for (int64_t x : dims) n *= static_cast<size_t>(x);
  return r.read_as_double(d, path, n);
}

}  // namespace

std::vector<std::string> take_merge_fixtures(std::vector<std::string>& files) {
  std::vector<h5::FileImage> images;
  for (const std::string& f : files)
    if (auto img = h5::load_image(f)) images.push_back(std::move(*img));
  std::vector<const h5::FileImage*> ptrs;
  for (const auto& img : images) ptrs.push_back(&img);
  (void)h5::vet_in_child(ptrs, "merge-kind", [](const h5::FileImage& img) { (void)is_merge_fixture(img.path); });
  std::vector<std::string> merges, rest;
  std::vector<const h5::FileImage*> merge_images;
  for (size_t i = 0, k = 0; i < files.size(); ++i) {
    const bool m = is_merge_fixture(files[i]);
    (m ? merges : rest).push_back(files[i]);
    while (k < images.size() && images[k].path != files[i]) ++k;
    if (m && k < images.size()) merge_images.push_back(&images[k]);
  }
  // The merge fixtures' full reads vetted in one more child for all of them: read_merge_fixture then finds each
  // outcome kept instead of starting a child per file.
  (void)h5::vet_in_child(merge_images, "merge-fixture", [](const h5::FileImage& img) {
    try {
      (void)read_merge_fixture(img.path);
    } catch (const std::exception&) {  // an ordinary error: repeated (and reported) by the caller's read
    }
  });
  files = std::move(rest);
  return merges;
}

bool is_merge_fixture(const std::string& path) {
  try {
    return h5::untrusted_read(path, "merge-kind", [&] {
      h5::QuietErrors quiet;
      h5::Reader r{path};
      h5::Id file = r.open_file();
      return r.has_attr(file, "kind") && r.attr_str(file, "/", "kind") == kKind;
    });
  } catch (const std::exception&) {
    return false;  // not ours to report: the attention reader names what is wrong with the file
  }
}

std::string merge_fixture_image(const std::string& path, const MergeFixture& f) {
  const MergeProblem& p = f.problem;
  validate(p);
  const ExpectedStored e = expected_stored(p, f.inputs, reference_merge(p, f.inputs).merged);
  h5::MemoryFile mem(path);
  const hid_t file = mem.id();
  {
    h5::Id root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose);
    h5::write_attr(root, "schema_version", kFixtureSchemaVersion);
    h5::write_attr(root, "kind", std::string(kKind));
    h5::write_attr(root, "name", p.name);
    h5::write_attr(root, "attncheck_version", std::string(attncheck_version()));
    h5::write_attr(root, "reference_precision", std::string("fp64"));
    h5::write_attr_u64(root, "seed", f.seed);
    h5::write_attr(root, "command", f.command);
    h5::write_attr(root, "source", f.source);
    h5::write_attr(root, "description", f.description);
    h5::write_attr(root, "N", p.N), h5::write_attr(root, "B", p.B), h5::write_attr(root, "H", p.H);
    h5::write_attr(root, "L", p.L), h5::write_attr(root, "D", p.D);
    h5::write_attr(root, "dtype", std::string(to_string(p.dtype)));
    h5::write_attr(root, "conventions", p.conv.text());
    h5::write_attr(root, "tolerance_model", std::string("attncheck derived merge bound (docs/states.md)"));
  }
  const bool norm = p.conv.form == StateForm::normalised;
  {
    h5::Id g = h5::create_group(file, "inputs");
    h5::write_tensor(g, "o", f.inputs.o, stored_o_dims(p, true), o_dim_names(p, true));
    const std::vector<int64_t> sd = stored_stat_dims(p, true);
    if (norm)
      h5::write_tensor(g, "lse", *f.inputs.lse, sd, stat_dim_names(p, true));
    else
      h5::write_tensor(g, "max", *f.inputs.max, sd, stat_dim_names(p, true)),
          h5::write_tensor(g, "sum", *f.inputs.sum, sd, stat_dim_names(p, true));
  }
  {
    h5::Id g = h5::create_group(file, "expected");
    h5::write_doubles(g, "o", e.o, stored_o_dims(p, false), o_dim_names(p, false));
    const std::vector<int64_t> sd = stored_stat_dims(p, false);
    h5::write_doubles(g, norm ? "lse" : "max", e.s1, sd, stat_dim_names(p, false));
    if (!norm) h5::write_doubles(g, "sum", e.s2, sd, stat_dim_names(p, false));
  }
  return mem.close();
}

void write_merge_fixture(const std::string& path, const MergeFixture& f) {
  write_file_durably(path, merge_fixture_image(path, f));
}

MergeFixture read_merge_fixture(const std::string& path) {
  return h5::untrusted_read(path, "merge-fixture", [&] {
    h5::QuietErrors quiet;
    try {
      h5::Reader r{path};
      h5::Id file = r.open_file();
      MergeFixture f;
      if (!r.has_attr(file, "kind") || r.attr_str(file, "/", "kind") != kKind)
        r.fail("/", "attribute 'kind' is not \"merge\"");
      const int64_t v = r.attr_i64(file, "/", "schema_version");
      if (v < 2 || v > kFixtureSchemaVersion) r.fail("/", "schema_version " + std::to_string(v) + " not supported");
      MergeProblem& p = f.problem;
      p.name = r.attr_str(file, "/", "name");
      p.N = r.attr_i64(file, "/", "N"), p.B = r.attr_i64(file, "/", "B"), p.H = r.attr_i64(file, "/", "H");
      p.L = r.attr_i64(file, "/", "L"), p.D = r.attr_i64(file, "/", "D");
      try {
        p.dtype = dtype_from_string(r.attr_str(file, "/", "dtype"));
        p.conv = parse_conventions(r.attr_str(file, "/", "conventions"));
        validate(p);
      } catch (const std::invalid_argument& e) {
        r.fail("/", e.what());
      }
      f.seed = r.attr_u64(file, "/", "seed");
      f.command = r.attr_str(file, "/", "command");
      f.source = r.attr_str(file, "/", "source");
      f.description = r.attr_str(file, "/", "description");
      StoredStates in = make_merge_inputs(p);
      const std::vector<int64_t> sd = stored_stat_dims(p, true);
      in.o = read_tensor(r, file, "/inputs/o", in.o, stored_o_dims(p, true));
      const bool norm = p.conv.form == StateForm::normalised;
      if (norm)
        in.lse = read_tensor(r, file, "/inputs/lse", *in.lse, sd);
      else
        in.max = read_tensor(r, file, "/inputs/max", *in.max, sd),
        in.sum = read_tensor(r, file, "/inputs/sum", *in.sum, sd);
      f.inputs = std::move(in);
      // The stored expectation must be the reference merge of these inputs (to fp64 rounding across libms).
      const ExpectedStored e = expected_stored(p, f.inputs, reference_merge(p, f.inputs).merged);
      const std::vector<int64_t> od = stored_stat_dims(p, false);
      auto agree = [&](const char* name, const std::vector<double>& want, const std::vector<int64_t>& dims) {
        const std::vector<double> got = read_doubles(r, file, std::string("/expected/") + name, dims);
        for (size_t i = 0; i < want.size(); ++i)
          if (!(got[i] == want[i] || std::fabs(got[i] - want[i]) <= 1e-12 * (1 + std::fabs(want[i]))))
            r.fail(std::string("/expected/") + name, "element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                                                         ", the reference merge of /inputs gives " +
                                                         std::to_string(want[i]));
      };
      agree("o", e.o, stored_o_dims(p, false));
      agree(norm ? "lse" : "max", e.s1, od);
      if (!norm) agree("sum", e.s2, od);
      return f;
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      if (m.rfind(path + ": ", 0) == 0) throw;
      throw std::invalid_argument(path + ": " + m);
    }
  });
}

}  // namespace attncheck
