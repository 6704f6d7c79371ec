// Reading stored reports for baseline comparison: every schema since the first (schema 1 had no schema_version,
// no dtype/features and no accuracy profile); a malformed file is an input error naming the file and the field.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "baseline.hpp"
#include "status.hpp"

namespace attncheck::baseline {

bool Row::failed() const {
  const std::optional<verify::Status> s = verify::status_from_string(status);
  return !s || verify::is_failure(*s);
}

using json = nlohmann::json;

namespace {
// Unit roundoffs of the dtypes a report names (accuracy.ulp_dtype).
double unit_of(const std::string& d) {
  if (d == "fp64") return std::ldexp(1.0, -53);
  if (d == "fp32") return std::ldexp(1.0, -24);
  if (d == "fp16") return std::ldexp(1.0, -11);
  if (d == "bf16") return std::ldexp(1.0, -8);
  return 0;
}

double number(const json& j, const char* key, double absent) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absent;  // null: a non-finite value (reports have no NaN or inf)
  if (!it->is_number()) throw std::invalid_argument(std::string("field '") + key + "' is not a number");
  return it->get<double>();
}

std::string text(const json& j, const char* key, bool required) {
  const auto it = j.find(key);
  if (it == j.end()) {
    if (required) throw std::invalid_argument(std::string("field '") + key + "' is missing");
    return "";
  }
  if (!it->is_string()) throw std::invalid_argument(std::string("field '") + key + "' is not a string");
  return it->get<std::string>();
}

Row read_row(const json& c) {
  if (!c.is_object()) throw std::invalid_argument("a case is not an object");
  Row r;
  r.fixture = text(c, "fixture", true), r.impl = text(c, "impl", true), r.status = text(c, "status", true);
  r.dtype = text(c, "dtype", false);
  // Schema 1 has no dtype field: the case name starts with it ("fp16/B2-...").
  if (r.dtype.empty()) r.dtype = r.fixture.substr(0, r.fixture.find('/'));
  if (const auto f = c.find("features"); f != c.end()) {
    if (!f->is_array()) throw std::invalid_argument("field 'features' is not an array");
    for (const auto& s : *f) r.features.push_back(s.get<std::string>());
  }
  if (const auto ts = c.find("tensors"); ts != c.end() && r.judged()) {
    if (!ts->is_array()) throw std::invalid_argument("field 'tensors' is not an array");
    for (const auto& t : *ts) {
      TensorStats s;
      s.tensor = text(t, "tensor", true);
      s.max_abs_err = number(t, "max_abs_err", INFINITY);
      if (const auto a = t.find("accuracy"); a != t.end() && a->is_object()) {
        s.has_accuracy = true;
        s.rms_rel = number(*a, "rms_rel", INFINITY);
        s.share = number(*a, "share_of_bound", INFINITY);
        s.bias_mag_ulp = number(*a, "bias_mag_ulp", 0);
        s.unit = unit_of(text(*a, "ulp_dtype", false));
      }
      r.tensors.push_back(s);
    }
  }
  return r;
}
}  // namespace

Report parse_report(const std::string& json_text, const std::string& origin) {
  Report rep;
  rep.origin = origin;
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw std::invalid_argument(origin + ": not a JSON report (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("cases") || !j["cases"].is_array())
    throw std::invalid_argument(
        origin + ": not an attncheck report (no 'cases' array; write one with verify --report FILE.json)");
  if (j.contains("schema_version")) {
    if (!j["schema_version"].is_number_integer())
      throw std::invalid_argument(origin + ": field 'schema_version' is not an integer");
    rep.schema_version = j["schema_version"].get<int>();
    if (rep.schema_version < 1 || rep.schema_version > kNewestSchema)
      throw std::invalid_argument(origin + ": schema_version " + std::to_string(rep.schema_version) +
                                  " is not one this attncheck reads (1.." + std::to_string(kNewestSchema) + ")");
  }
  if (const auto ts = j.find("tol_scale"); ts != j.end() && ts->is_number()) rep.tol_scale = ts->get<double>();
  size_t k = 0;
  try {
    for (; k < j["cases"].size(); ++k) rep.rows.push_back(read_row(j["cases"][k]));
  } catch (const std::exception& e) {
    throw std::invalid_argument(origin + ": cases[" + std::to_string(k) + "]: " + e.what());
  }
  return rep;
}

Report load_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read report '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_report(ss.str(), path);
}

}  // namespace attncheck::baseline
