// `attncheck generate --spec golden/suite.json --out golden [--update] [--filter GLOB]`: rebuilds the golden suite
// (or the cases whose name or file name matches GLOB) from its spec,
// byte-identically. Each file is built in memory and written durably (durable_file.hpp); an existing file whose
// bytes would change is left alone unless --update, and what changed is printed numerically (max |diff| of expected out).
#include <fnmatch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>

#include "attncheck/durable_file.hpp"
#include "attncheck/suite.hpp"
#include "attncheck/state_suite.hpp"
#include "merge_rows.hpp"
#include "command.hpp"
#include "report.hpp"
#include "shard.hpp"

namespace attncheck::cli {
namespace {

namespace fs = std::filesystem;

struct Options {
  std::string spec, out = "golden", filter;
  bool update = false;
  std::optional<std::string> shard;
};
Options g;

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

// Sharded (--shard I/N), case k of the spec's selected cases is built by shard k mod N: the N runs write disjoint
// files, into one --out or into N that are copied together; there is no report to merge.
int run_generate() {
  const std::optional<Shard> shard = resolve_shard(g.shard);
  if (is_merge_suite(g.spec)) {
    if (shard) throw std::invalid_argument("--shard: a merge-state suite (" + g.spec + ") is one short run, not sharded");
    return generate_merge_suite(g.spec, g.out, g.update);  // docs/states.md
  }
  const SuiteSpec spec = read_suite(g.spec);
  const fs::path dir = fs::path(g.out) / spec.subdir;
  fs::create_directories(dir);
  int created = 0, same = 0, updated = 0, differ = 0;
  size_t selected = 0, built = 0;
  std::set<std::string> expected_files;
  Progress progress(spec.cases.size());
  for (const CaseSpec& c : spec.cases) {
    progress.step(c.name);
    const std::string file = fixture_file_name(c.name);
    expected_files.insert(file);
    if (!g.filter.empty() && fnmatch(g.filter.c_str(), c.name.c_str(), 0) != 0 &&
        fnmatch(g.filter.c_str(), file.c_str(), 0) != 0)
      continue;
    if (!runs_unit(shard, selected++)) continue;
    ++built;
    const fs::path target = dir / file;
    const Fixture f = build_case(c, spec.file_name);
    const std::string bytes = fixture_image(target.string(), f);
    std::string line;
    if (fs::exists(target) && !fs::is_regular_file(target))
      throw std::invalid_argument(target.string() + ": exists and is not a regular file");
    if (!fs::exists(target)) {
      write_file_durably(target.string(), bytes);
      ++created;
      line = "new      " + c.name;
    } else if (slurp(target) == bytes) {
      ++same;
    } else {
      const std::string what = describe_change(target, f);
      if (g.update) {
        write_file_durably(target.string(), bytes);
        ++updated;
        line = "updated  " + c.name + ": " + what;
      } else {
        ++differ;
        line = "DIFFERS  " + c.name + ": " + what + " (not written; rerun with --update)";
      }
    }
    if (!line.empty()) {
      progress.clear();
      std::printf("%s\n", line.c_str());
    }
  }
  progress.clear();
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".h5" && !expected_files.count(e.path().filename().string()))
      std::printf("stale    %s (not in %s; delete it if the case was removed)\n", e.path().string().c_str(),
                  spec.file_name.c_str());
  if (selected == 0) throw std::invalid_argument("--filter '" + g.filter + "' matches no case of " + spec.file_name);
  if (shard) announce_shard(*shard, built, ("of " + std::to_string(selected) + " cases built").c_str());
  std::printf("%zu cases in %s: %d new, %d unchanged, %d updated, %d differ\n", built, dir.string().c_str(),
              created, same, updated, differ);
  return differ ? 1 : 0;
}

const Register reg{{"generate", "Build golden fixtures from a suite spec (byte-identical)", [](CLI::App& sub) {
                      sub.add_option("--spec", g.spec, "Suite spec (golden/suite.json)")->required();
                      sub.add_option("--out", g.out, "Output directory; fixtures go to OUT/<spec subdir>/")
                          ->capture_default_str();
                      sub.add_flag("--update", g.update, "Overwrite existing fixtures whose bytes change");
                      sub.add_option("--filter", g.filter,
                                     "Only the cases whose name or file name matches this glob (e.g. 'fp16_*causal*')");
                      add_shard_option(sub, g.shard);
                      return std::function<int()>(run_generate);
                    }}};

}  // namespace
}  // namespace attncheck::cli
