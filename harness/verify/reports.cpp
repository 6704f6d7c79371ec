// The JSON and JUnit XML reports of result rows (see reports.hpp). JSON has no NaN or infinity: non-finite numbers
// are written as null, and the message text still shows them.
#include "reports.hpp"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "attncheck/durable_file.hpp"

namespace attncheck::verify {

using json = nlohmann::json;

namespace {
std::string lower_ext(const std::string& path) {
  const auto dot = path.rfind('.');
  std::string e = dot == std::string::npos ? "" : path.substr(dot);
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

json num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

const char* index_names(const TensorVerdict& t, int k) {
  static const char* o[] = {"b", "h", "i", "d"};
  static const char* w[] = {"b", "h", "i", "j"};
  return t.tensor == "weights" ? w[k] : o[k];
}

json tensor_json(const TensorVerdict& t) {
  json idx = json::object();
  for (int k = 0; k < t.worst_rank; ++k) idx[index_names(t, k)] = t.worst[static_cast<size_t>(k)];
  json j = {{"tensor", t.tensor}, {"pass", t.pass}, {"n", t.n}, {"n_bad", t.n_bad},
            {"max_abs_err", num(t.max_abs_err)}, {"max_rel_err", num(t.max_rel_err)}, {"worst_index", idx},
            {"expected", num(t.expected)}, {"actual", num(t.actual)}, {"tolerance", num(t.tolerance)},
            {"dominant_term", t.dominant}};
  if (t.accuracy.present) j["accuracy"] = accuracy_json(t.accuracy);
  return j;
}

// Case names come from fixture files and messages from plugins: neither is guaranteed UTF-8, and both report
// formats must stay well-formed. Each invalid byte becomes U+FFFD.
std::string valid_utf8(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 && b >= 0xc2 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e && b <= 0xf4 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok && n == 3) {  // no overlong forms, no surrogates
      const auto b1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(b == 0xe0 && b1 < 0xa0) && !(b == 0xed && b1 >= 0xa0);
    }
    if (ok && n == 4) {
      const auto b1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(b == 0xf0 && b1 < 0x90) && !(b == 0xf4 && b1 >= 0x90);
    }
    if (ok) {
      o.append(s, i, n);
      i += n;
    } else {
      o += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return o;
}

std::string xml_escape(const std::string& raw) {
  const std::string s = valid_utf8(raw);
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') ? ' ' : c;
    }
  }
  return o;
}
}  // namespace

std::map<Status, int> status_counts(const std::vector<CaseResult>& rs) {
  std::map<Status, int> n;
  for (Status s : all_statuses()) n[s] = 0;
  for (const auto& r : rs) ++n[r.status];
  return n;
}

json accuracy_json(const Accuracy& a) {
  json hist = json::object();
  const char* bins[] = {"0", "le_0.5", "le_1", "le_2", "le_4", "more"};
  for (size_t b = 0; b < a.ulp_hist.size(); ++b) hist[bins[b]] = a.ulp_hist[b];
  return {{"ulp_dtype", to_string(a.ulp_dtype)}, {"n", a.n}, {"n_nonfinite", a.n_nonfinite},
          {"share_of_bound", num(a.share)}, {"rms_rel", num(a.rms_rel)}, {"bias_ulp", num(a.bias_ulp)},
          {"bias_mag_ulp", num(a.bias_mag_ulp)}, {"ulp_hist", hist},
          {"effective_bits", a.effective_bits ? num(*a.effective_bits) : json(nullptr)}};
}

// The report lands complete or not at all (durable_file.hpp); a failure is an input error naming the flag.
void write_report_file(const std::string& path, const std::string& text) {
  try {
    write_file_durably(path, text);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(std::string("--report: ") + e.what());
  }
}

void check_report_path(const std::string& path) {
  const std::string e = lower_ext(path);
  if (e != ".json" && e != ".xml")
    throw std::invalid_argument("--report: '" + path + "' must end in .json or .xml");
  // Writable now, not after a long run: the directory must exist and accept files (the file itself is only
  // created at the end, so a run that stops on bad input leaves no empty report behind).
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path), dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (fs::is_directory(p, ec)) throw std::invalid_argument("--report: '" + path + "' is a directory");
  if (!fs::is_directory(dir, ec))
    throw std::invalid_argument("--report: cannot write '" + path + "': directory '" + dir.string() +
                                "' does not exist");
  if (::access(fs::exists(p, ec) ? path.c_str() : dir.c_str(), W_OK) != 0)
    throw std::invalid_argument("--report: cannot write '" + path + "': " + std::strerror(errno));
}

std::string report_json(const std::vector<CaseResult>& rs, double tol_scale, bool case_per_line,
                        const std::vector<std::string>& notes) {
  std::map<Status, int> n = status_counts(rs);
  std::ostringstream out;
  {
    json cases = json::array();
    for (const auto& r : rs) {
      json c = {{"fixture", r.fixture}, {"file", r.file}, {"impl", r.impl}, {"status", to_string(r.status)},
                {"message", r.message}};
      if (!r.dtype.empty()) c["dtype"] = r.dtype, c["features"] = r.features;
      if (!r.diagnosis_json.empty()) c["diagnosis"] = json::parse(r.diagnosis_json);
      if (r.judged) {
        const TensorVerdict& w = r.verdict.worst();
        const json t = tensor_json(w);
        c["tensor"] = w.tensor;
        for (const char* k : {"max_abs_err", "max_rel_err", "tolerance", "worst_index", "expected", "actual"})
          c[k] = t[k];
        c["tensors"] = json::array();
        for (const auto& tv : r.verdict.tensors) c["tensors"].push_back(tensor_json(tv));
      } else {
        for (const char* k : {"max_abs_err", "max_rel_err", "tolerance", "worst_index", "expected", "actual"})
          c[k] = nullptr;
      }
      cases.push_back(c);
    }
    json summary = json::object();
    for (Status st : all_statuses()) summary[to_string(st)] = n[st];
    json j = {{"schema_version", kReportSchemaVersion}, {"cases", cases}, {"summary", summary},
              {"tol_scale", tol_scale}};
    if (!notes.empty()) j["notes"] = notes;
    if (case_per_line) {
      auto dump = [](const json& x) { return x.dump(-1, ' ', false, json::error_handler_t::replace); };
      out << "{\"schema_version\":" << kReportSchemaVersion << ",\"summary\":" << dump(summary)
          << ",\"tol_scale\":" << dump(tol_scale);
      if (!notes.empty()) out << ",\"notes\":" << dump(j["notes"]);
      out << ",\"cases\":[\n";
      for (size_t k = 0; k < cases.size(); ++k) out << dump(cases[k]) << (k + 1 < cases.size() ? ",\n" : "\n");
      out << "]}\n";
    } else {
      out << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
    }
  }
  return out.str();
}

void write_report(const std::string& path, const std::vector<CaseResult>& rs, double tol_scale,
                  const std::vector<std::string>& notes) {
  check_report_path(path);
  std::ostringstream out;
  if (lower_ext(path) == ".json") {
    out << report_json(rs, tol_scale, false, notes);
  } else {
    // JUnit: one testsuite per implementation, one testcase per fixture. A wrong answer (fail, modified-input,
    // out-of-bounds) is a <failure>, a run that broke down (error, crashed, timeout, exited) an <error>,
    // unsupported and unavailable <skipped>; the attncheck status is the element's `type`.
    auto tag_of = [](Status st) {
      // input-error (a file that could not be read) is an <error>
      return st == Status::fail || st == Status::modified_input || st == Status::out_of_bounds ? "failure"
             : st == Status::unsupported || st == Status::unavailable || st == Status::finite_required ? "skipped"
                                                                                                     : "error";
    };
    std::map<std::string, std::vector<const CaseResult*>> by_impl;
    int tf = 0, te = 0, ts = 0;
    for (const auto& r : rs) {
      by_impl[r.impl].push_back(&r);
      if (r.status == Status::pass) continue;
      const std::string t = tag_of(r.status);
      tf += t == "failure", te += t == "error", ts += t == "skipped";
    }
    out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"attncheck\" tests=\"" << rs.size()
        << "\" failures=\"" << tf << "\" errors=\"" << te << "\" skipped=\"" << ts << "\">\n";
    for (const auto& [impl, list] : by_impl) {
      int f = 0, e = 0, s = 0;
      for (const auto* r : list) {
        if (r->status == Status::pass) continue;
        const std::string t = tag_of(r->status);
        f += t == "failure", e += t == "error", s += t == "skipped";
      }
      out << "  <testsuite name=\"" << xml_escape(impl) << "\" tests=\"" << list.size() << "\" failures=\"" << f
          << "\" errors=\"" << e << "\" skipped=\"" << s << "\">\n";
      if (!notes.empty()) {
        out << "    <properties>\n";
        for (const std::string& n : notes)
          out << "      <property name=\"attncheck.note\" value=\"" << xml_escape(n) << "\"/>\n";
        out << "    </properties>\n";
      }
      for (const auto* r : list) {
        out << "    <testcase classname=\"" << xml_escape(impl) << "\" name=\"" << xml_escape(r->fixture) << "\"";
        if (r->status == Status::pass) {
          out << "/>\n";
          continue;
        }
        out << ">\n";
        out << "      <" << tag_of(r->status) << " message=\"" << xml_escape(r->message) << "\" type=\""
            << xml_escape(to_string(r->status)) << "\"/>\n    </testcase>\n";
      }
      out << "  </testsuite>\n";
    }
    out << "</testsuites>\n";
  }
  write_report_file(path, out.str());
}

}  // namespace attncheck::verify
