// Regenerating a suite's fixtures byte-identically (regenerate.hpp).
#include "attncheck/regenerate.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>

#include "attncheck/durable_file.hpp"
#include "attncheck/fixture.hpp"

namespace attncheck {

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// Largest |a - b| over two vectors; NaN matching NaN is no difference, NaN against a number is infinite.
double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
      continue;
    }
    if (a[i] == b[i]) continue;  // also equal infinities
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

std::string describe_change(const fs::path& old_file, const Fixture& now) {
  char buf[512];
  try {
    const Fixture old = read_fixture(old_file.string());
    if (old.problem.name() != now.problem.name())
      return "problem changed: " + old.problem.name() + " -> " + now.problem.name();
    const double din = std::max({max_diff(old.inputs.q.to_double(), now.inputs.q.to_double()),
                                 max_diff(old.inputs.k.to_double(), now.inputs.k.to_double()),
                                 max_diff(old.inputs.v.to_double(), now.inputs.v.to_double())});
    std::snprintf(buf, sizeof buf, "expected out max |diff| %.3g, lse max |diff| %.3g, inputs q/k/v max |diff| %.3g%s",
                  max_diff(old.expected.out, now.expected.out), max_diff(old.expected.lse, now.expected.lse), din,
                  old.provenance.attncheck_version != now.provenance.attncheck_version
                      ? (" (attncheck " + old.provenance.attncheck_version + " -> " +
                         now.provenance.attncheck_version + ")").c_str()
                      : "");
    return buf;
  } catch (const std::exception& e) {
    return std::string("old file unreadable (") + e.what() + ")";
  }
}

}  // namespace

RegenerateCounts regenerate_suite(const SuiteSpec& spec, const RegenerateOptions& o) {
  const fs::path dir = fs::path(o.out) / spec.subdir;
  fs::create_directories(dir);
  RegenerateCounts n;
  n.dir = dir.string();
  std::set<std::string> expected_files;
  for (const CaseSpec& c : spec.cases) {
    if (o.on_case) o.on_case(c.name);
    const std::string file = fixture_file_name(c.name);
    expected_files.insert(file);
    if (!o.filter.empty() && fnmatch(o.filter.c_str(), c.name.c_str(), 0) != 0 &&
        fnmatch(o.filter.c_str(), file.c_str(), 0) != 0)
      continue;
    const size_t k = n.selected++;
    if (o.builds && !o.builds(k)) continue;
    ++n.built;
    const fs::path target = dir / file;
    const Fixture f = build_case(c, spec.file_name);
    const std::string bytes = fixture_image(target.string(), f);
    std::string line;
    if (fs::exists(target) && !fs::is_regular_file(target))
      throw std::invalid_argument(target.string() + ": exists and is not a regular file");
    if (!fs::exists(target)) {
      write_file_durably(target.string(), bytes);
      ++n.created;
      line = "new      " + c.name;
    } else if (slurp(target) == bytes) {
      ++n.same;
    } else {
      const std::string what = describe_change(target, f);
      if (o.update) {
        write_file_durably(target.string(), bytes);
        ++n.updated;
        line = "updated  " + c.name + ": " + what;
      } else {
        ++n.differ;
        line = "DIFFERS  " + c.name + ": " + what + " (not written; rerun with --update)";
      }
    }
    if (!line.empty() && o.on_line) o.on_line(line);
  }
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".h5" && !expected_files.count(e.path().filename().string()) && o.on_line)
      o.on_line("stale    " + e.path().string() + " (not in " + spec.file_name + "; delete it if the case was removed)");
  if (n.selected == 0) throw std::invalid_argument("--filter '" + o.filter + "' matches no case of " + spec.file_name);
  return n;
}

}  // namespace attncheck
