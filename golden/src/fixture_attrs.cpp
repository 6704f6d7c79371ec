// Problem fields <-> fixture attributes and per-batch datasets, generically over the feature table: a new field
// needs no code here. Booleans are int64 0/1, enums their names, uint64 an unsigned attribute (golden/SCHEMA.md).
#include "fixture_attrs.hpp"

#include <stdexcept>

#include "attncheck/features.hpp"

namespace attncheck::fixture_detail {

namespace {
template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;  // clang 14 (the fuzz and sanitizer builds) lacks C++20's implicit guide
using P = Problem;
}  // namespace

void write_provenance(hid_t root, const Provenance& pv) {
  h5::write_attr(root, "attncheck_version", pv.attncheck_version);
  h5::write_attr(root, "reference_precision", pv.reference_precision);
  h5::write_attr_u64(root, "seed", pv.seed);
  h5::write_attr(root, "distribution", pv.distribution);
  h5::write_attr(root, "command", pv.command);
}

void read_provenance(const h5::Reader& r, hid_t root, Provenance& pv) {
  pv.attncheck_version = r.attr_str(root, "/", "attncheck_version");
  pv.reference_precision = r.attr_str(root, "/", "reference_precision");
  pv.seed = r.attr_u64(root, "/", "seed");
  pv.distribution = r.attr_str(root, "/", "distribution");
  pv.command = r.attr_str(root, "/", "command");
}

void write_problem_attrs(hid_t root, const Problem& p) {
  for (const Field& f : problem_fields()) {
    if (f.stored == Stored::dataset) continue;
    if (f.stored == Stored::if_set && field_is_default(p, f)) continue;
    const char* k = f.key;
    std::visit(Overload{[&](DerivedF64 fn) { h5::write_attr(root, k, fn(p)); },
                        [&](int64_t P::*m) { h5::write_attr(root, k, p.*m); },
                        [&](bool P::*m) { h5::write_attr(root, k, int64_t{p.*m}); },
                        [&](double P::*m) { h5::write_attr(root, k, p.*m); },
                        [&](uint64_t P::*m) { h5::write_attr_u64(root, k, p.*m); },
                        [&](std::optional<double> P::*m) { h5::write_attr(root, k, *(p.*m)); },
                        [&](std::optional<std::array<int64_t, 4>> P::*m) {
                          h5::write_attr(root, k, std::vector<int64_t>((p.*m)->begin(), (p.*m)->end()));
                        },
                        [&](std::vector<int64_t> P::*) {}, [&](std::vector<double> P::*) {},
                        [&](std::string P::*m) { h5::write_attr(root, k, p.*m); },  // as written, not escaped
                        [&](auto P::*m) { h5::write_attr(root, k, std::string(to_string(p.*m))); }},
               f.ref);
  }
}

void write_problem_datasets(hid_t inputs, const Problem& p) {
  auto write = [&](const char* key, hid_t type, const auto& v) {
    if (!v.empty()) h5::write_dataset(inputs, key, type, {static_cast<int64_t>(v.size())}, v.data());
  };
  for (const Field& f : problem_fields()) {
    if (f.stored != Stored::dataset) continue;
    if (const auto* m = std::get_if<std::vector<int64_t> P::*>(&f.ref)) write(f.key, H5T_STD_I64LE, p.**m);
    if (const auto* m = std::get_if<std::vector<double> P::*>(&f.ref)) write(f.key, H5T_IEEE_F64LE, p.**m);
  }
}

void read_problem_attrs(const h5::Reader& r, hid_t root, Problem& p) {
  for (const Field& f : problem_fields()) {
    if (f.stored == Stored::dataset || f.stored == Stored::derived) continue;
    if (f.stored == Stored::if_set && !r.has_attr(root, f.key)) continue;
    const char* k = f.key;
    std::visit(Overload{[&](DerivedF64) {}, [&](int64_t P::*m) { p.*m = r.attr_i64(root, "/", k); },
                        [&](bool P::*m) {
                          const int64_t v = r.attr_i64(root, "/", k);
                          if (v != 0 && v != 1) r.fail(k, "must be 0 or 1, got " + std::to_string(v));
                          p.*m = v == 1;
                        },
                        [&](double P::*m) { p.*m = r.attr_f64(root, "/", k); },
                        [&](uint64_t P::*m) { p.*m = r.attr_u64(root, "/", k); },
                        [&](std::optional<double> P::*m) { p.*m = r.attr_f64(root, "/", k); },
                        [&](std::optional<std::array<int64_t, 4>> P::*m) {
                          const auto v = r.attr_i64s(root, "/", k);
                          if (v.size() != 4) r.fail(k, "must have 4 entries, got " + std::to_string(v.size()));
                          p.*m = std::array<int64_t, 4>{v[0], v[1], v[2], v[3]};
                        },
                        [&](std::vector<int64_t> P::*) {}, [&](std::vector<double> P::*) {},
                        [&](std::string P::*m) { p.*m = r.attr_str(root, "/", k); },
                        [&](auto P::*) {
                          try {
                            set_field_text(p, f, r.attr_str(root, "/", k));
                          } catch (const std::invalid_argument& e) {
                            r.fail(k, e.what());
                          }
                        }},
               f.ref);
  }
}

void read_problem_datasets(const h5::Reader& r, hid_t file, Problem& p) {
  for (const Field& f : problem_fields()) {
    if (f.stored != Stored::dataset) continue;
    const std::string path = std::string("/inputs/") + f.key;
    // Lists: any 1-d length up to 2^24 (sinks: Hq; alibi_slopes: Hq or B*Hq; cu_seqlens_*: S + 1; block_table:
    // B * pages; ...), and validate() checks it against the problem, naming the field.
    if (const auto* m = std::get_if<std::vector<double> P::*>(&f.ref)) (p.**m).clear();
    if (const auto* m = std::get_if<std::vector<int64_t> P::*>(&f.ref)) (p.**m).clear();
    if (!r.has_object(file, path)) continue;
    h5::Id d = r.open_dataset(file, path);
    const std::vector<int64_t> e = r.extents(d, path);
    const int64_t n = e.size() == 1 && e[0] >= 1 && e[0] <= (int64_t{1} << 24) ? e[0] : 0;
    r.expect_extents(d, path, {n});
    if (const auto* m = std::get_if<std::vector<double> P::*>(&f.ref)) {
      p.** m = r.read_as_double(d, path, static_cast<size_t>(n));
      continue;
    }
    auto& v = p.*std::get<std::vector<int64_t> P::*>(f.ref);
    v.resize(static_cast<size_t>(n));
    r.read_i64(d, path, v.data());
  }
}

}  // namespace attncheck::fixture_detail
