// Parsing the suite spec (nlohmann_json). Unknown keys are errors: a typo in a reviewed spec must not silently
// produce a different suite. Defaults come from the spec's "defaults" object, then from Problem's defaults.
#include "attncheck/suite.hpp"

#include "attncheck/features.hpp"
#include "attncheck/fixture_gradients.hpp"
#include "attncheck/reference.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

namespace attncheck {

using json = nlohmann::json;

namespace {

// Keys of the spec that are not Problem fields; every field of the feature table is a key too.
const std::set<std::string> kSpecOnlyKeys = {
    "name",      "D",         "dtype",     "window", "distribution", "seed", "comment", "tag", "weights_max_elements",
    "gradients", "exact_out", "block_mask"};

// A JSON value as the feature table's text form (field_text): bools 0/1, lists joined by ',' ('x' for 4-d shapes).
std::string field_json_text(const Field& f, const json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return v.dump();
  const bool shape = std::holds_alternative<std::optional<std::array<int64_t, 4>> Problem::*>(f.ref);
  if (shape && v.size() != 4) throw std::invalid_argument(std::string(f.key) + ": must be a list of 4 integers");
  // Lists of doubles take numbers and "-inf" (JSON has no infinities); every other list takes integers.
  const bool reals = std::holds_alternative<std::vector<double> Problem::*>(f.ref);
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const bool ok = reals ? v[i].is_number() || v[i] == "-inf" : v[i].is_number_integer();
    if (!ok)
      throw std::invalid_argument(std::string(f.key) + ": must be a list of " +
                                  (reals ? "numbers (or \"-inf\")" : "integers") + ", got " + v.dump());
    if (i) out.push_back(shape ? 'x' : ',');
    out += v[i].is_string() ? v[i].get<std::string>() : v[i].dump();
  }
  return out;
}

CaseSpec parse_case(const json& c, DType dtype) {
  for (const auto& [k, v] : c.items()) {
    const Field* f = find_field(k);
    if (!kSpecOnlyKeys.count(k) && (!f || f->stored == Stored::derived))
      throw std::invalid_argument("unknown key '" + k + "'");
  }
  CaseSpec cs;
  Problem& p = cs.problem;
  auto get = [&](const char* key, auto& out) {
    if (!c.contains(key)) return false;
    try {
      out = c.at(key).get<std::remove_reference_t<decltype(out)>>();
    } catch (const json::exception& e) {
      throw std::invalid_argument(std::string(key) + ": " + e.what());
    }
    return true;
  };
  int64_t D = 0;
  if (get("D", D)) p.Dqk = p.Dv = D;  // Dqk / Dv, when given, override D
  p.dtype = dtype;
  p.bias_dtype = p.dtype == DType::f64 ? DType::f64 : DType::f32;
  p.want_lse = true;
  for (const Field& f : problem_fields())  // every other field by its table key
    if (f.key != std::string("dtype") && c.contains(f.key)) set_field_text(p, f, field_json_text(f, c[f.key]));
  if (c.contains("window")) {
    const json& w = c["window"];
    if (!w.is_array() || w.size() != 2) throw std::invalid_argument("window: must be [left, right] (-1 = unbounded)");
    p.window_left = w[0].get<int64_t>();
    p.window_right = w[1].get<int64_t>();
  }
  validate(p);                  // before any product of the extents below: validate bounds them
  int64_t weights_max = 16384;  // weights are stored in double: 128 KiB at most per fixture by default
  get("weights_max_elements", weights_max);
  if (!c.contains("want_weights")) p.want_weights = p.B * p.Hq * p.Lq * p.Lk <= weights_max;
  if (std::string d; get("distribution", d)) cs.distribution = gen::distribution_from_string(d);
  get("seed", cs.seed);
  get("gradients", cs.gradients);
  get("exact_out", cs.exact_out);
  if (get("block_mask", cs.block_mask) && (cs.block_mask.size() != 2 || cs.block_mask[0] < 1 || cs.block_mask[1] < 1))
    throw std::invalid_argument("block_mask: must be [q_block, kv_block], two block sizes of at least 1, got " +
                                c["block_mask"].dump());
  // A fixture the reader would refuse could be generated (or die allocating) but never verified.
  const uint64_t cap = budget().max_bytes;
  if (fixture_memory_bytes(p) > double(cap))
    throw std::invalid_argument("size: " + p.short_name() + " needs " + std::to_string(fixture_memory_bytes(p)) +
                                " bytes in memory, " + over_memory_budget(cap));
  check_work(p, cs.gradients, budget().max_flops);
  cs.name = p.short_name() + "/" + gen::to_string(cs.distribution) + (cs.gradients ? "/grad" : "");
  if (!cs.block_mask.empty())
    cs.name += "/block-mask-" + std::to_string(cs.block_mask[0]) + "x" + std::to_string(cs.block_mask[1]);
  std::string tag;  // distinguishes cases whose parameters the problem name does not show (e.g. key_lengths)
  if (get("tag", tag)) cs.name += "/" + tag;
  get("name", cs.name);
  cs.seed = case_seed(cs.seed, cs.name);
  if (fixture_file_name(cs.name)[0] == '.')  // verify skips hidden files (the temporaries of an interrupted run)
    throw std::invalid_argument("name: '" + cs.name + "' would be written as the hidden file " +
                                fixture_file_name(cs.name) + ", which verify skips");
  return cs;
}

}  // namespace

uint64_t case_seed(uint64_t spec_seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  uint64_t z = spec_seed ^ h;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

SuiteSpec read_suite(const std::string& path) {
  if (std::filesystem::is_directory(path))
    throw std::invalid_argument(path + ": is a directory, expected a suite spec file (golden/suite.json)");
  std::ifstream f(path);
  if (!f) throw std::invalid_argument(path + ": cannot open the suite spec");
  return parse_suite(std::string(std::istreambuf_iterator<char>(f), {}), path);
}

SuiteSpec parse_suite(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw std::invalid_argument(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object())
    throw std::invalid_argument(path + ": must be a JSON object with \"cases\", got " + j.type_name());
  SuiteSpec s;
  s.file_name = std::filesystem::path(path).filename().string();
  for (const auto& [k, v] : j.items())
    if (k != "schema_version" && k != "subdir" && k != "defaults" && k != "cases" && k != "comment")
      throw std::invalid_argument(path + ": unknown top-level key '" + k + "'");
  if (!j.contains("schema_version") || j["schema_version"] != 1)
    throw std::invalid_argument(path + ": schema_version: must be 1");
  if (j.contains("subdir") && !j["subdir"].is_string())
    throw std::invalid_argument(path + ": subdir: must be a string, got " + j["subdir"].dump());
  s.subdir = j.value("subdir", std::string("cases"));
  if (s.subdir.empty() || s.subdir.find("..") != std::string::npos || s.subdir[0] == '/')
    throw std::invalid_argument(path + ": subdir: must be a relative directory name, got '" + s.subdir + "'");
  if (j.contains("defaults") && !j["defaults"].is_object())
    throw std::invalid_argument(path + ": defaults: must be an object, got " + j["defaults"].dump());
  const json defaults = j.value("defaults", json::object());
  if (!j.contains("cases") || !j["cases"].is_array()) throw std::invalid_argument(path + ": cases: must be a list");
  std::set<std::string> names;
  for (size_t i = 0; i < j["cases"].size(); ++i) {
    const json& raw = j["cases"][i];
    if (raw.is_object() && raw.size() == 1 && raw.contains("comment")) continue;  // a section heading
    const std::string where = path + ": cases[" + std::to_string(i) + "]";
    if (!raw.is_object()) throw std::invalid_argument(where + ": must be an object, got " + raw.dump());
    json c = defaults;
    c.merge_patch(raw);
    try {
      std::vector<std::string> dtypes;
      const json dt = c.value("dtype", json("fp32"));
      if (dt.is_array())
        for (const auto& x : dt) dtypes.push_back(x.get<std::string>());
      else
        dtypes.push_back(dt.get<std::string>());
      if (dtypes.empty()) throw std::invalid_argument("dtype: an empty list makes no case");
      for (const auto& d : dtypes) {
        json one = c;
        if (dtypes.size() > 1 && one.contains("name")) one["name"] = one["name"].get<std::string>() + "/" + d;
        CaseSpec cs = parse_case(one, dtype_from_string(d));
        if (!names.insert(cs.name).second)
          throw std::invalid_argument("name: duplicate case name '" + cs.name + "' (set \"name\" or \"tag\")");
        s.cases.push_back(std::move(cs));
      }
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + ": " + e.what());
    } catch (const json::exception& e) {
      throw std::invalid_argument(where + ": " + e.what());
    }
  }
  return s;
}

Fixture build_case(const CaseSpec& c, const std::string& spec_file_name) {
  Provenance prov;
  prov.attncheck_version = attncheck_version();
  prov.seed = c.seed;
  prov.distribution = gen::to_string(c.distribution);
  prov.command = "attncheck generate --spec " + spec_file_name;
  ToleranceModel tol;
  tol.exact_out = c.exact_out;
  Fixture f = make_fixture(c.name, c.problem, gen::generate_inputs(c.problem, c.distribution, c.seed), prov, tol);
  check_exact_out(f);
  if (c.gradients) add_gradients(f, c.seed);
  if (!c.block_mask.empty()) f.block_mask = derive_block_mask(f.problem, f.inputs, c.block_mask[0], c.block_mask[1]);
  return f;
}

Fixture build_case_rows(const CaseSpec& c, const std::string& spec_file_name, int64_t rows) {
  if (rows <= 0 || rows >= c.problem.Lq) return build_case(c, spec_file_name);
  Fixture f;
  f.name = c.name;
  f.problem = c.problem;
  f.inputs = gen::generate_inputs(c.problem, c.distribution, c.seed);
  f.expected = reference_attention_rows(f.problem, f.inputs, sample_rows(f.problem, f.inputs, rows));
  f.tolerance.exact_out = c.exact_out;
  check_exact_out(f);
  if (!c.block_mask.empty()) f.block_mask = derive_block_mask(f.problem, f.inputs, c.block_mask[0], c.block_mask[1]);
  f.provenance.attncheck_version = attncheck_version();
  f.provenance.seed = c.seed;
  f.provenance.distribution = gen::to_string(c.distribution);
  f.provenance.command = "attncheck verify --spec " + spec_file_name + " --rows " + std::to_string(rows);
  return f;
}

}  // namespace attncheck
