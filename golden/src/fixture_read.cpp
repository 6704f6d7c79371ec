// Reading fixtures and candidates (golden/SCHEMA.md). Order matters: schema_version first, then the problem's
// attributes (validated), then the memory cap from those shapes, then each dataset's dtype and extents are
// checked against the problem, and only then is anything allocated and read.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "attncheck/features.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/mla.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/fixture.hpp"
#include "fixture_attrs.hpp"
#include "fixture_block_mask.hpp"
#include "fixture_grad.hpp"
#include "fixture_layout.hpp"
#include "attncheck/user_arrays.hpp"
#include "candidate_npz.hpp"
#include "h5.hpp"
#include "untrusted.hpp"
#include "h5_ints.hpp"

namespace attncheck {

using fixture_detail::stored_dims;
using fixture_detail::to_layout;

namespace {

std::string fmt_g(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// Attributes -> Problem (from the feature table), name, provenance, tolerance. Per-batch vectors are read from
// /inputs after the shape check.
void read_attrs(h5::Reader& r, hid_t root, Fixture& f) {
  Provenance& pv = f.provenance;
  pv.schema_version = r.attr_i64(root, "/", "schema_version");
  r.allow_vlen_strings = pv.schema_version == 1;  // v1 stored strings at variable length
  if (pv.schema_version > kFixtureSchemaVersion)
    r.fail("schema_version",
           "is " + std::to_string(pv.schema_version) + ", from the future: this attncheck (" + attncheck_version() +
               ") reads schema_version <= " + std::to_string(kFixtureSchemaVersion) + "; upgrade attncheck");
  if (pv.schema_version < 1) r.fail("schema_version", "must be >= 1, got " + std::to_string(pv.schema_version));
  f.name = r.attr_str(root, "/", "name");
  fixture_detail::read_provenance(r, root, pv);

  fixture_detail::read_problem_attrs(r, root, f.problem);

  f.tolerance.lambda = r.attr_f64(root, "/", "tolerance_lambda");
  f.tolerance.rel_floor = r.attr_f64(root, "/", "tolerance_rel_floor");
  // Bounded above too: a file claiming lambda 1e300 (or a relative floor of 100%) would pass any candidate.
  if (!(f.tolerance.lambda > 0 && f.tolerance.lambda <= 1000))
    r.fail("tolerance_lambda", "must be in (0, 1000] (the model's multiplier is 3), got " + fmt_g(f.tolerance.lambda));
  if (!(f.tolerance.rel_floor > 0 && f.tolerance.rel_floor <= 1))
    r.fail("tolerance_rel_floor", "must be in (0, 1], got " + fmt_g(f.tolerance.rel_floor));
  const int64_t exact = r.has_attr(root, "exact_out") ? r.attr_i64(root, "/", "exact_out") : 0;
  if (exact != 0 && exact != 1) r.fail("exact_out", "must be 0 or 1, got " + std::to_string(exact));
  f.tolerance.exact_out = exact == 1;
}

// A rule broken by a dataset's contents (a key_lengths of the wrong length, say) names the dataset's path; every
// other rule names "problem".
void validate_problem(const h5::Reader& r, const Problem& p) {
  try {
    validate(p);
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    for (const Field& f : problem_fields()) {
      const size_t n = std::char_traits<char>::length(f.key);
      if (f.stored == Stored::dataset && msg.compare(0, n, f.key) == 0 && msg.size() > n &&
          (msg[n] == ' ' || msg[n] == '[' || msg[n] == ':'))
        r.fail(std::string("/inputs/") + f.key, msg);
    }
    r.fail("problem", msg);
  }
}

// From the attributes alone, before any dataset is allocated.
void check_size(const h5::Reader& r, const Problem& p, uint64_t cap) {
  const double total = fixture_memory_bytes(p);
  if (total > double(cap))
    r.fail("size", "the tensors of problem [B=" + std::to_string(p.B) + ",Hq=" + std::to_string(p.Hq) +
                       ",Hkv=" + std::to_string(p.Hkv) + ",Lq=" + std::to_string(p.Lq) + ",Lk=" + std::to_string(p.Lk) +
                       ",Dqk=" + std::to_string(p.Dqk) + ",Dv=" + std::to_string(p.Dv) + "] need " +
                       std::to_string(total) + " bytes, " + over_memory_budget(cap));
}

Fixture read_header(h5::Reader& r, hid_t file, const FixtureReadOptions& options) {
  const uint64_t cap = options.max_bytes;
  Fixture f;
  h5::Id root = r.open_group(file, "/");
  read_attrs(r, root, f);
  {  // The attributes alone: the block table of a paged cache is a dataset, read below and checked with the rest.
    Problem attrs = f.problem;
    attrs.page_size = attrs.num_pages = 0;
    // Likewise a modification with a dataset parameter (the T5 table) or an expression (its tensors' values): its
    // attributes wait for it.
    auto waits = [](const Field& x) {
      return x.stored == Stored::dataset || std::holds_alternative<std::string Problem::*>(x.ref);
    };
    for (const ModEntry& m : modifications())
      if (std::any_of(m.fields.begin(), m.fields.end(), waits))
        for (const Field& x : m.fields)
          if (x.stored != Stored::dataset) set_field_text(attrs, x, field_text(Problem{}, x));
    validate_problem(r, attrs);
  }
  // effective_scale is what h5py users read; it must be the one the problem implies, bit for bit.
  if (r.has_attr(root, "effective_scale")) {
    const double stored = r.attr_f64(root, "/", "effective_scale"), implied = f.problem.effective_scale();
    if (!(stored == implied))
      r.fail("effective_scale", "is " + fmt_g(stored) + " but the problem implies " + fmt_g(implied) +
                                    " (scale attribute or 1/sqrt(Dqk))");
  }
  check_size(r, f.problem, cap);
  fixture_detail::read_gradients(r, file, f, false, cap);     // only the attribute `gradients`
  check_work(f.problem, f.has_gradients, options.max_flops);  // "work: ...", before any dataset is read
  fixture_detail::read_problem_datasets(r, file, f.problem);
  validate_problem(r, f.problem);
  // problem_name (written as short_name()) must describe the problem read: a deleted /inputs/key_lengths would
  // otherwise turn a padded case into an unpadded one that verify fails (exit 1) instead of refusing.
  if (r.has_attr(root, "problem_name")) {
    const std::string stored = r.attr_str(root, "/", "problem_name"), read = f.problem.short_name();
    if (stored != read)
      r.fail("problem_name", "is '" + stored + "' but the attributes and datasets describe '" + read +
                                 "' (an attribute changed, or a dataset under /inputs such as key_lengths missing?)");
  }
  return f;
}

// Checks dtype and extents, then allocates a tensor in the layout's storage order and reads into it.
Tensor read_tensor(const h5::Reader& r, hid_t file, const std::string& path, DType t,
                   const std::vector<int64_t>& logical, Layout l) {
  h5::Id d = r.open_dataset(file, path);
  r.expect_dtype(d, path, t);
  r.expect_extents(d, path, stored_dims(logical, l));
  Tensor out(t, logical, storage_order(l));
  r.read_raw(d, path, t, out.bytes.data());
  return out;
}

std::vector<double> read_doubles(const h5::Reader& r, hid_t file, const std::string& path,
                                 const std::vector<int64_t>& dims) {
  h5::Id d = r.open_dataset(file, path);
  r.expect_dtype(d, path, DType::f64);
  r.expect_extents(d, path, dims);
  size_t n = 1;
  for (int64_t x : dims) n *= static_cast<size_t>(x);
  return r.read_as_double(d, path, n);
}

std::optional<Tensor> read_optional(const h5::Reader& r, hid_t file, const std::string& path, bool declared,
                                    const char* declared_by, DType t, const std::vector<int64_t>& dims) {
  const bool present = r.has_object(file, path);
  if (declared && !present) r.fail(path, std::string("missing dataset (declared by ") + declared_by + ")");
  if (!declared && present) r.fail(path, std::string("present but not declared by ") + declared_by);
  if (!declared) return std::nullopt;
  if (t != DType::u8) return read_tensor(r, file, path, t, dims, Layout::BHSD);
  // Masks and keep-masks are 0/1 (plugin.h): a 2 would be "attend" to `!= 0` and "masked" to `== 1`, so
  // implementations could disagree on a malformed fixture instead of being judged. Any integer width and h5py's
  // enum bool are read unclipped (an int8 -1 is named, not turned into 0).
  h5::Id d = r.open_dataset(file, path);
  r.expect_extents(d, path, dims);
  Tensor out(t, dims);
  const std::vector<int64_t> v = h5::read_integers(r, d, path, out.bytes.size());
  for (size_t n = 0; n < v.size(); ++n) {
    if (v[n] != 0 && v[n] != 1)
      r.fail(path, "values must be 0 or 1, got " + std::to_string(v[n]) + " at element " + std::to_string(n) +
                       ", index " + index_string(dims, int64_t(n)));
    out.bytes[n] = static_cast<uint8_t>(v[n]);
  }
  return out;
}

// What a fixture read depends on besides the file's bytes (untrusted.hpp's cache of reads done safely).
std::string options_key(const FixtureReadOptions& o) {
  std::string key = ":";  // appended, not ":" + to_string(): gcc 12 -Wrestrict false positive
  return key.append(std::to_string(o.max_bytes)).append(":").append(std::to_string(o.max_flops));
}

template <class F>
auto with_file_prefix(const std::string& path, F fn) {
  h5::QuietErrors quiet;
  try {
    return fn();
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    if (msg.rfind(path + ": ", 0) == 0) throw;
    throw std::invalid_argument(path + ": " + msg);
  }
}

}  // namespace

double fixture_memory_bytes(const Problem& p) {
  const double B = double(p.B), Hq = double(p.Hq), Hkv = double(p.Hkv), Lq = double(p.Lq), Lk = double(p.Lk);
  const double in_size = double(dtype_size(p.dtype));
  auto numel4 = [](const std::optional<std::array<int64_t, 4>>& s) {
    return s ? double((*s)[0]) * double((*s)[1]) * double((*s)[2]) * double((*s)[3]) : 0.0;
  };
  const double kv_tokens = p.page_size > 0 ? double(p.num_pages) * double(p.page_size) : B * Lk;  // pages: the pool
  const double q = B * Hq * Lq * double(p.Dqk) * in_size, k = kv_tokens * Hkv * double(p.Dqk) * in_size,
               v = kv_tokens * Hkv * double(p.Dv) * in_size;
  const double masks = numel4(p.mask_shape) + numel4(p.bias_shape) * double(dtype_size(p.bias_dtype)) +
                       (p.dropout_p > 0 ? B * Hq * Lq * Lk : 0.0);
  const double expected =
      8.0 * (2 * B * Hq * Lq * double(p.Dv) + 2 * B * Hq * Lq + (p.want_weights ? B * Hq * Lq * Lk : 0) +
             (p.scores_out != ScoresOut::none ? 3 * B * Hq * Lq * Lk : 0) +  // scores + 2 scales
             (p.max_logit != MaxLogitOut::none ? 4 * B * Hq * Lq : 0) +      // max_logit + 3 scales
             (p.past_len > 0 ? B * Hkv * Lk * double(p.Dqk + p.Dv) : 0));    // present k, v
  return q + k + v + masks + expected;
}

Fixture read_fixture_header(const std::string& path, const FixtureReadOptions& options) {
  return h5::untrusted_read(path, "header" + options_key(options), [&] {
    return with_file_prefix(path, [&] {
      h5::Reader r{path};
      h5::Id file = r.open_file();
      return read_header(r, file, options);
    });
  });
}

void prepare_fixture_reads(const std::vector<std::string>& paths, const FixtureReadOptions& options) {
  constexpr size_t kBatchBytes = size_t{256} << 20;  // images held in memory at once
  std::vector<h5::FileImage> batch;
  size_t bytes = 0;
  auto flush = [&] {
    std::vector<const h5::FileImage*> images;
    for (const auto& img : batch) images.push_back(&img);
    h5::vet_in_child(images, "fixture" + options_key(options),
                     [&](const h5::FileImage& img) { (void)read_fixture(img.path, options); });
    batch.clear();
    bytes = 0;
  };
  for (const std::string& p : paths) {
    std::optional<h5::FileImage> img = h5::load_image(p);
    if (!img) continue;
    bytes += img->bytes.size();
    batch.push_back(std::move(*img));
    if (bytes >= kBatchBytes) flush();
  }
  if (!batch.empty()) flush();
}

Fixture read_fixture(const std::string& path, const FixtureReadOptions& options) {
  return h5::untrusted_read(path, "fixture" + options_key(options), [&] {
    return with_file_prefix(path, [&] {
      h5::Reader r{path};
      h5::Id file = r.open_file();
      Fixture f = read_header(r, file, options);
      const Problem& p = f.problem;
      r.open_group(file, "/inputs");
      r.open_group(file, "/expected");
      Inputs& in = f.inputs;
      in.q = read_tensor(r, file, "/inputs/q", p.dtype, {p.B, p.Hq, p.Lq, p.Dqk}, p.layout);
      in.k = read_tensor(r, file, "/inputs/k", kv_storage_dtype(p), qkv_shape(p, 1), p.layout);
      if (p.mla)
        tie_latent_values(p, in);  // stored once, as k
      else
        in.v = read_tensor(r, file, "/inputs/v", kv_storage_dtype(p), qkv_shape(p, 2), p.layout);
      if (p.past_len > 0) {
        in.past_k = read_tensor(r, file, "/inputs/past_key", p.dtype, {p.B, p.Hkv, p.past_len, p.Dqk}, p.layout);
        in.past_v = read_tensor(r, file, "/inputs/past_value", p.dtype, {p.B, p.Hkv, p.past_len, p.Dv}, p.layout);
      }
      auto vec = [](const std::optional<std::array<int64_t, 4>>& s) {
        return s ? std::vector<int64_t>(s->begin(), s->end()) : std::vector<int64_t>{};
      };
      in.mask = read_optional(r, file, "/inputs/mask", p.mask_shape.has_value(), "attribute mask_shape", DType::u8,
                              vec(p.mask_shape));
      in.bias = read_optional(r, file, "/inputs/bias", p.bias_shape.has_value(), "attribute bias_shape", p.bias_dtype,
                              vec(p.bias_shape));
      in.k_scale = read_optional(r, file, "/inputs/k_scale", p.kv_quantized(), "attribute kv_scales", p.kv_scale_dtype,
                                 kv_scale_shape(p, 1));
      in.v_scale = read_optional(r, file, "/inputs/v_scale", p.kv_quantized(), "attribute kv_scales", p.kv_scale_dtype,
                                 kv_scale_shape(p, 2));
      const bool mins = p.kv_quantized() && p.kv_dtype == DType::q4_1;
      in.k_min = read_optional(r, file, "/inputs/k_min", mins, "attribute kv_dtype=q4_1", p.kv_scale_dtype,
                               kv_scale_shape(p, 1));
      in.v_min = read_optional(r, file, "/inputs/v_min", mins, "attribute kv_dtype=q4_1", p.kv_scale_dtype,
                               kv_scale_shape(p, 2));
      in.keep = read_optional(r, file, "/inputs/keep", p.dropout_p > 0, "attribute dropout_p > 0", DType::u8,
                              {p.B, p.Hq, p.Lq, p.Lk});

      ExpectedAttention& e = f.expected;
      const std::vector<int64_t> out_dims = stored_dims({p.B, p.Hq, p.Lq, p.Dv}, p.layout);
      e.out = to_layout(read_doubles(r, file, "/expected/out", out_dims), p.B, p.Hq, p.Lq, p.Dv, p.layout, true);
      e.out_abs =
          to_layout(read_doubles(r, file, "/expected/out_abs", out_dims), p.B, p.Hq, p.Lq, p.Dv, p.layout, true);
      e.lse = read_doubles(r, file, "/expected/lse", {p.B, p.Hq, p.Lq});
      e.score_mag = read_doubles(r, file, "/expected/score_mag", {p.B, p.Hq, p.Lq});
      if (p.want_weights) e.weights = read_doubles(r, file, "/expected/weights", {p.B, p.Hq, p.Lq, p.Lk});
      if (p.scores_out != ScoresOut::none)
        e.scores = read_doubles(r, file, "/expected/scores", {p.B, p.Hq, p.Lq, p.Lk});
      if (p.max_logit != MaxLogitOut::none)
        e.max_logit = read_doubles(r, file, "/expected/max_logit", {p.B, p.Hq, p.Lq});
      if (p.past_len > 0) {
        e.present_k =
            to_layout(read_doubles(r, file, "/expected/present_key", stored_dims({p.B, p.Hkv, p.Lk, p.Dqk}, p.layout)),
                      p.B, p.Hkv, p.Lk, p.Dqk, p.layout, true);
        e.present_v =
            to_layout(read_doubles(r, file, "/expected/present_value", stored_dims({p.B, p.Hkv, p.Lk, p.Dv}, p.layout)),
                      p.B, p.Hkv, p.Lk, p.Dv, p.layout, true);
      }
      try {
        validate(p, in);
      } catch (const std::invalid_argument& ex) {
        r.fail("inputs", ex.what());
      }
      if (!h5::in_reading_child()) {  // computed from values already read: the reading child leaves them to the parent
        fill_error_scales(p, in, e);  // the tolerance model's row scales, from the stored inputs (docs/tolerance.md)
        try {
          check_exact_out(f);  // a hand-edited exact_out must not turn a correct result into a failure
        } catch (const std::invalid_argument& ex) {
          const std::string w = ex.what();
          r.fail("exact_out", w.substr(w.find(": ") + 2));
        }
      }
      fixture_detail::read_gradients(r, file, f, true, options.max_bytes);
      fixture_detail::read_block_mask(r, file, f);
      f.checksummed = r.unchecksummed == 0;
      return f;
    });
  });
}

Outputs read_candidate(const std::string& path, const Problem& p, const FixtureReadOptions& options) {
  if (std::filesystem::path(path).extension() == ".npz")
    return fixture_detail::read_candidate_npz(path, p, options.max_bytes);
  return h5::untrusted_read(path, "", [&] {
    return with_file_prefix(path, [&] {
      const h5::Reader r{path};
      h5::Id file = r.open_file();
      r.open_group(file, "/actual");
      // Count only the outputs the candidate holds: an out-only candidate of a large fixture is valid.
      const double rows = double(p.B) * double(p.Hq) * double(p.Lq);
      const bool has_lse = r.has_object(file, "/actual/lse"), has_weights = r.has_object(file, "/actual/weights");
      const bool has_scores = r.has_object(file, "/actual/scores");
      const bool has_max_logit = p.max_logit != MaxLogitOut::none && r.has_object(file, "/actual/max_logit");
      const bool has_amax_o = p.fp8_out && r.has_object(file, "/actual/amax_o");
      const bool has_present = r.has_object(file, "/actual/present_key") && r.has_object(file, "/actual/present_value");
      const double need =
          8.0 * rows *
              (double(p.Dv) + (has_lse ? 1 : 0) + (has_weights ? double(p.Lk) : 0) + (has_scores ? double(p.Lk) : 0)) +
          (has_present ? 8.0 * double(p.B) * double(p.Hkv) * double(p.Lk) * double(p.Dqk + p.Dv) : 0);
      if (need > double(options.max_bytes))
        r.fail("size", "candidate needs " + std::to_string(need) + " bytes, " + over_memory_budget(options.max_bytes));
      Outputs o;
      // Each output keeps the precision it was delivered in (a 16-bit float dataset is judged as fp16, a
      // bfloat16-encoded one as bf16), so the tolerance model charges exactly that output rounding.
      auto read_into = [&](const std::string& where, std::optional<Tensor>& t, const std::vector<int64_t>& logical,
                           const std::vector<int64_t>& dims, std::vector<int> order) {
        h5::Id d = r.open_dataset(file, where);
        r.expect_extents(d, where, dims);
        const std::string type = r.type_name(d);
        const bool bf16 = type == "unsigned 16-bit integer";  // read_as_double accepts only the bfloat16 encoding
        const DType dt = type == "16-bit float"   ? DType::f16
                         : bf16                   ? DType::bf16
                         : type == "32-bit float" ? DType::f32
                                                  : DType::f64;
        t = order.empty() ? Tensor(dt, logical) : Tensor(dt, logical, order);
        const std::vector<double> v = r.read_as_double(d, where, static_cast<size_t>(t->numel()));
        for (size_t n = 0; n < v.size(); ++n) t->set_offset(static_cast<int64_t>(n), v[n]);  // storage order, exact
      };
      std::optional<Tensor> out;
      read_into("/actual/out", out, {p.B, p.Hq, p.Lq, p.Dv}, stored_dims({p.B, p.Hq, p.Lq, p.Dv}, p.layout),
                storage_order(p.layout));
      o.out = std::move(*out);
      if (has_lse) read_into("/actual/lse", o.lse, {p.B, p.Hq, p.Lq}, {p.B, p.Hq, p.Lq}, {});
      if (has_weights) read_into("/actual/weights", o.weights, {p.B, p.Hq, p.Lq, p.Lk}, {p.B, p.Hq, p.Lq, p.Lk}, {});
      if (has_scores) read_into("/actual/scores", o.scores, {p.B, p.Hq, p.Lq, p.Lk}, {p.B, p.Hq, p.Lq, p.Lk}, {});
      if (has_max_logit) read_into("/actual/max_logit", o.max_logit, max_logit_shape(p), max_logit_shape(p), {});
      if (has_amax_o) read_into("/actual/amax_o", o.amax_o, {1}, {1}, {});
      if (has_present) {
        read_into("/actual/present_key", o.present_k, {p.B, p.Hkv, p.Lk, p.Dqk},
                  stored_dims({p.B, p.Hkv, p.Lk, p.Dqk}, p.layout), storage_order(p.layout));
        read_into("/actual/present_value", o.present_v, {p.B, p.Hkv, p.Lk, p.Dv},
                  stored_dims({p.B, p.Hkv, p.Lk, p.Dv}, p.layout), storage_order(p.layout));
      }
      return o;
    });
  });
}

}  // namespace attncheck
