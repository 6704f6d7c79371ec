#include "merge_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>

#include "attncheck/fixture.hpp"
#include "attncheck/state_fixture.hpp"
#include "merge_diagnosis.hpp"  // harness/diagnose
#include "merge_power.hpp"

namespace attncheck::power {
namespace {

// The merge fixtures under dir, sorted; files that do not open go to unreadable.
std::vector<std::string> merge_fixture_files(const std::string& dir, std::vector<std::string>& unreadable) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
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
  return files;
}

MergeTableRow run_variant(const MergeVariant& v, const std::vector<MergeFixture>& fx) {
  MergeTableRow row{v.name, v.expect};
  int right = 0;
  std::map<std::string, int> tags;
  for (const MergeFixture& f : fx) {
    StoredStates out = make_merge_outputs(f.problem);
    out.o.fill(std::nan(""));  // every element must be written, as run_merge_impl poisons
    for (std::optional<Tensor>* t : {&out.lse, &out.max, &out.sum})
      if (*t) (*t)->fill(std::nan(""));
    run_merge_variant(v, f.problem, f.inputs, out);
    if (judge_merge(f.problem, f.inputs, out).pass) continue;
    ++row.failed;
    const std::string tag = diagnose_merge(f.problem, f.inputs, out).tag;
    ++tags[tag];
    // Under a -inf sentinel, taking the sentinel as an lse is exactly the NaN of an empty state: same model.
    const bool same_bug = v.expect == "lse-sentinel" && f.problem.conv.empty_lse == EmptyLse::neg_inf;
    right += tag == (same_bug ? "empty-state-nan" : v.expect);
  }
  for (const auto& [tag, n] : tags) row.tags += (row.tags.empty() ? "" : ", ") + tag + " " + std::to_string(n);
  if (v.expect.empty())
    row.verdict = row.failed ? "FALSE-ALARM" : "pass";
  else if (!row.failed)
    row.verdict = "MISSED";
  else
    row.verdict = right == row.failed ? "caught" : "caught, WRONG TAG " + std::to_string(row.failed - right);
  return row;
}

}  // namespace

bool MergeTable::accepted() const {
  return std::all_of(rows.begin(), rows.end(),
                     [](const MergeTableRow& r) { return r.verdict == "pass" || r.verdict == "caught"; });
}

MergeTable merge_table(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) throw std::invalid_argument("--merge: '" + dir + "' is not a directory");
  MergeTable t;
  const std::vector<std::string> files = merge_fixture_files(dir, t.unreadable);
  if (files.empty() && t.unreadable.empty())
    throw std::invalid_argument("--merge: no merge fixtures under '" + dir + "'");
  std::vector<MergeFixture> fx;
  for (const auto& f : files) {
    try {
      fx.push_back(read_merge_fixture(f));
    } catch (const std::invalid_argument& x) {
      const std::string m = x.what();
      t.unreadable.push_back(m.rfind(f, 0) == 0 ? m : f + ": " + m);
    }
  }
  std::sort(t.unreadable.begin(), t.unreadable.end());
  t.fixtures = fx.size();
  for (const MergeVariant& v : merge_variants()) t.rows.push_back(run_variant(v, fx));
  return t;
}

int print_merge_table(const MergeTable& t) {
  std::printf("%-24s %-20s %8s %8s  %-40s %s\n", "variant", "expected tag", "fixtures", "failed",
              "diagnosis (fixtures)", "verdict");
  for (const MergeTableRow& r : t.rows)
    std::printf("%-24s %-20s %8zu %8d  %-40s %s\n", r.variant.c_str(), r.expect.empty() ? "(correct)" : r.expect.c_str(),
                t.fixtures, r.failed, r.tags.empty() ? "-" : r.tags.c_str(), r.verdict.c_str());
  const bool ok = t.accepted();
  std::printf("merge power: %s\n", ok ? "every fault caught with its tag, no false alarm" : "NOT ACCEPTED");
  if (t.unreadable.empty()) return ok ? 0 : 1;
  std::printf("unreadable input files (%zu), every other fixture used:\n", t.unreadable.size());
  for (const std::string& u : t.unreadable) std::printf("  %s\n", u.c_str());
  std::fprintf(stderr,
               "attncheck: exit 2: %zu input file(s) could not be read (listed above); every other merge "
               "fixture was used\n",
               t.unreadable.size());
  return 2;
}

}  // namespace attncheck::power
