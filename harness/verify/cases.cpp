#include "cases.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>

#include "attncheck/cancel.hpp"
#include "attncheck/module_fixture.hpp"
#include "attncheck/state_fixture.hpp"
#include "module_rows.hpp"

namespace attncheck::verify {

namespace fs = std::filesystem;

bool matches(const std::string& filter, const std::string& name, const std::string& file) {
  if (filter.empty()) return true;
  bool negative = false, any_positive = false, positive_hit = false;
  size_t start = 0;
  while (start <= filter.size()) {
    const size_t end = std::min(filter.find(':', start), filter.size());
    std::string pat = filter.substr(start, end - start);
    start = end + 1;
    if (!pat.empty() && pat[0] == '-') {
      negative = true;
      pat.erase(0, 1);
    }
    if (pat.empty()) continue;
    const bool hit = fnmatch(pat.c_str(), name.c_str(), 0) == 0 || fnmatch(pat.c_str(), file.c_str(), 0) == 0;
    if (negative && hit) return false;
    if (!negative) {
      any_positive = true;
      positive_hit = positive_hit || hit;
    }
  }
  return !any_positive || positive_hit;
}

std::optional<std::string> read_error(const std::string& file, const std::function<void()>& read) {
  try {
    read();
    return std::nullopt;
  } catch (const Cancelled&) {
    throw;
  } catch (const std::exception& e) {
    const std::string m = e.what();
    return m.find(file) == std::string::npos ? file + ": " + m : m;
  }
}

namespace {

// Every *.h5 under dir (recursively, sorted by path so shards are stable), with its case name; a file whose
// header cannot be read keeps its place with an empty name and the reason in `unreadable`.
void list_fixtures(const std::string& dir, Cases& cases) {
  if (!fs::is_directory(dir))
    throw std::invalid_argument("--fixtures: '" + dir +
                                "' is not a directory (run from the repository root, or "
                                "pass --fixtures DIR)");
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".h5" && e.path().filename().string()[0] != '.')
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  const std::vector<std::string> merges = take_merge_fixtures(files);  // states and merges: docs/states.md
  prepare_fixture_reads(files);  // every file read once in one separate process, not one process per read
  prepare_module_reads(files);   // likewise for the module-fixture check and the module fixtures
  for (const auto& f : files) {
    std::string name;
    if (is_module_fixture(f)) {  // judged through module entries (module_rows.hpp); unreadable: its own row there
      cases.list.push_back({f, module_case_name(f)});
      continue;
    }
    if (auto why = read_error(f, [&] { name = read_fixture_header(f).name; })) cases.unreadable[f] = *why;
    cases.list.push_back({f, name});
  }
  for (const auto& f : merges) {
    std::string name;
    if (auto why = read_error(f, [&] { name = read_merge_fixture(f).problem.name; })) cases.unreadable[f] = *why;
    cases.merges.insert(f);
    cases.list.push_back({f, name});
  }
}

}  // namespace

Cases find_cases(const Selection& s) {
  if (s.rows > 0 && s.spec.empty()) throw std::invalid_argument("--rows: needs --spec (fixture files hold every row)");
  if (has_backward(s.pass) && !s.spec.empty())
    throw std::invalid_argument(std::string("--pass ") + (s.pass == Pass::both ? "both" : "backward") +
                                ": not with --spec (gradients are judged from fixture files, e.g. --fixtures "
                                "golden/backward)");
  Cases cases;
  cases.rows = s.rows, cases.spec = s.spec;
  if (!s.spec.empty()) {
    cases.suite = read_suite(s.spec);
    for (const auto& c : cases.suite.cases) cases.list.push_back({s.spec, c.name});
  } else {
    list_fixtures(s.fixtures, cases);
    if (cases.list.empty()) throw std::invalid_argument("--fixtures: no *.h5 fixtures under '" + s.fixtures + "'");
  }
  std::erase_if(cases.list, [&](const Case& c) {
    const std::string file = fs::path(c.file).filename().string();
    return !matches(s.filter, c.name.empty() ? file : c.name, file);
  });
  if (cases.list.empty()) throw std::invalid_argument("--filter: '" + s.filter + "' matches no fixture");
  if (!has_forward(s.pass)) {  // the backward pass alone: only fixtures that carry gradients
    std::erase_if(cases.list, [&](const Case& c) {
      if (is_module_fixture(c.file)) return !module_fixture_has_gradients(c.file);
      return cases.merges.count(c.file) ||
             (!cases.unreadable.count(c.file) && !read_fixture_header(c.file).has_gradients);
    });
    if (cases.list.empty())
      throw std::invalid_argument("--pass backward: no fixture with gradients under '" + s.fixtures +
                                  "' (matching the filter); golden/backward has them");
  }
  for (size_t k = 0; k < cases.list.size(); ++k) cases.list[k].unit = k;
  if (s.shard) std::erase_if(cases.list, [&](const Case& c) { return !s.shard->owns(c.unit); });
  return cases;
}

Fixture load_case(const Cases& cases, const Case& c) {
  if (cases.spec.empty()) return read_fixture(c.file);
  for (const auto& sc : cases.suite.cases)
    if (sc.name == c.name) return build_case_rows(sc, cases.suite.file_name, cases.rows);
  throw std::logic_error("no case " + c.name);
}

}  // namespace attncheck::verify
