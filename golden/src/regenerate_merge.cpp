// Regenerating a merge-state suite's fixtures byte-identically (regenerate.hpp, docs/states.md).
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>

#include "attncheck/durable_file.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/regenerate.hpp"
#include "attncheck/state_fixture.hpp"
#include "attncheck/state_suite.hpp"

namespace attncheck {

RegenerateCounts regenerate_merge_suite(const std::string& spec, const RegenerateOptions& o) {
  namespace fs = std::filesystem;
  const MergeSuite suite = build_merge_suite(spec);
  const fs::path dir = fs::path(o.out) / suite.subdir;
  fs::create_directories(dir);
  RegenerateCounts n;
  n.dir = dir.string(), n.selected = n.built = suite.cases.size();
  auto line = [&](const std::string& s) {
    if (o.on_line) o.on_line(s);
  };
  std::set<std::string> names;
  for (const MergeFixture& f : suite.cases) {
    const std::string file = fixture_file_name(f.problem.name);
    if (!names.insert(file).second) throw std::invalid_argument(spec + ": two cases named " + f.problem.name);
    const fs::path target = dir / file;
    const std::string bytes = merge_fixture_image(target.string(), f);
    std::ifstream old(target, std::ios::binary);
    const std::string have = old ? std::string(std::istreambuf_iterator<char>(old), {}) : std::string();
    if (!old) {
      write_file_durably(target.string(), bytes), ++n.created;
      line("new      " + f.problem.name);
    } else if (have == bytes) {
      ++n.same;
    } else if (o.update) {
      write_file_durably(target.string(), bytes), ++n.updated;
      line("updated  " + f.problem.name);
    } else {
      ++n.differ;
      line("DIFFERS  " + f.problem.name + " (not written; rerun with --update)");
    }
  }
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".h5" && !names.count(e.path().filename().string()))
      line("stale    " + e.path().string() + " (not in " + spec + "; delete it if the case was removed)");
  return n;
}

}  // namespace attncheck
