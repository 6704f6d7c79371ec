// generate and power for merge suites (docs/states.md); verify's merge rows are harness/verify/merge_row.hpp.
#include "merge_rows.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "attncheck/durable_file.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/state_suite.hpp"
#include "merge_diagnosis.hpp"  // harness/diagnose
#include "merge_power.hpp"      // harness/power
#include <algorithm>
#include <map>

namespace attncheck::cli {

int generate_merge_suite(const std::string& spec, const std::string& out, bool update) {
  namespace fs = std::filesystem;
  const MergeSuite suite = build_merge_suite(spec);
  const fs::path dir = fs::path(out) / suite.subdir;
  fs::create_directories(dir);
  int created = 0, same = 0, updated = 0, differ = 0;
  std::set<std::string> names;
  for (const MergeFixture& f : suite.cases) {
    const std::string file = fixture_file_name(f.problem.name);
    if (!names.insert(file).second) throw std::invalid_argument(spec + ": two cases named " + f.problem.name);
    const fs::path target = dir / file;
    const std::string bytes = merge_fixture_image(target.string(), f);
    std::ifstream old(target, std::ios::binary);
    const std::string have = old ? std::string(std::istreambuf_iterator<char>(old), {}) : std::string();
    if (!old) {
      write_file_durably(target.string(), bytes), ++created;
      std::printf("new      %s\n", f.problem.name.c_str());
    } else if (have == bytes) {
      ++same;
    } else if (update) {
      write_file_durably(target.string(), bytes), ++updated;
      std::printf("updated  %s\n", f.problem.name.c_str());
    } else {
      ++differ;
      std::printf("DIFFERS  %s (not written; rerun with --update)\n", f.problem.name.c_str());
    }
  }
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".h5" && !names.count(e.path().filename().string()))
      std::printf("stale    %s (not in %s; delete it if the case was removed)\n", e.path().string().c_str(),
                  spec.c_str());
  std::printf("%zu cases in %s: %d new, %d unchanged, %d updated, %d differ\n", suite.cases.size(),
              dir.string().c_str(), created, same, updated, differ);
  return differ ? 1 : 0;
}

int merge_power_table(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw std::invalid_argument("--merge: '" + dir + "' is not a directory");
  // A merge fixture that cannot be read, and a .h5 file that does not even open as HDF5 (it may be one), is an
  // input error of its own: every other fixture still counts, and the run exits 2 (incomplete).
  std::vector<std::string> files, unreadable;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ".h5") continue;
    const std::string f = e.path().string();
    if (is_merge_fixture(f)) {
      files.push_back(f);
      continue;
    }
    try {
      (void)read_fixture_header(f);
    } catch (const std::invalid_argument& x) {
      if (std::string(x.what()).rfind(f + ": file: ", 0) == 0) unreadable.push_back(x.what());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty() && unreadable.empty())
    throw std::invalid_argument("--merge: no merge fixtures under '" + dir + "'");
  std::vector<MergeFixture> fx;
  for (const auto& f : files) {
    try {
      fx.push_back(read_merge_fixture(f));
    } catch (const std::invalid_argument& x) {
      const std::string m = x.what();
      unreadable.push_back(m.rfind(f, 0) == 0 ? m : f + ": " + m);
    }
  }
  std::sort(unreadable.begin(), unreadable.end());
  std::printf("%-24s %-20s %8s %8s  %-40s %s\n", "variant", "expected tag", "fixtures", "failed",
              "diagnosis (fixtures)", "verdict");
  bool ok = true;
  for (const power::MergeVariant& v : power::merge_variants()) {
    int failed = 0, right = 0;
    std::map<std::string, int> tags;
    for (const MergeFixture& f : fx) {
      StoredStates out = make_merge_outputs(f.problem);
      out.o.fill(std::nan(""));  // every element must be written, as run_merge_impl poisons
      for (std::optional<Tensor>* t : {&out.lse, &out.max, &out.sum})
        if (*t) (*t)->fill(std::nan(""));
      power::run_merge_variant(v, f.problem, f.inputs, out);
      if (judge_merge(f.problem, f.inputs, out).pass) continue;
      ++failed;
      const std::string tag = diagnose_merge(f.problem, f.inputs, out).tag;
      ++tags[tag];
      // Under a -inf sentinel, taking the sentinel as an lse is exactly the NaN of an empty state: same model.
      const bool same_bug = v.expect == "lse-sentinel" && f.problem.conv.empty_lse == EmptyLse::neg_inf;
      right += tag == (same_bug ? "empty-state-nan" : v.expect);
    }
    std::string t;
    for (const auto& [tag, n] : tags) t += (t.empty() ? "" : ", ") + tag + " " + std::to_string(n);
    std::string verdict;
    if (v.expect.empty())
      verdict = failed ? "FALSE-ALARM" : "pass";
    else if (!failed)
      verdict = "MISSED";
    else
      verdict = right == failed ? "caught" : "caught, WRONG TAG " + std::to_string(failed - right);
    ok = ok && (verdict == "pass" || verdict == "caught");
    std::printf("%-24s %-20s %8zu %8d  %-40s %s\n", v.name.c_str(), v.expect.empty() ? "(correct)" : v.expect.c_str(),
                fx.size(), failed, t.empty() ? "-" : t.c_str(), verdict.c_str());
  }
  std::printf("merge power: %s\n", ok ? "every fault caught with its tag, no false alarm" : "NOT ACCEPTED");
  if (unreadable.empty()) return ok ? 0 : 1;
  std::printf("unreadable input files (%zu), every other fixture used:\n", unreadable.size());
  for (const std::string& u : unreadable) std::printf("  %s\n", u.c_str());
  std::fprintf(stderr,
               "attncheck: exit 2: %zu input file(s) could not be read (listed above); every other merge "
               "fixture was used\n",
               unreadable.size());
  return 2;
}

}  // namespace attncheck::cli
