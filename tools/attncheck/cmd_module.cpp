// Module fixtures on the command line (docs/module.md): `generate-modules` writes the module golden suite
// (golden/modules/) byte for byte from module_suite.cpp, and `module-selftest` shows every module mutant caught and
// diagnosed with its tag on those fixtures (verify judges module fixtures: harness/verify/module_rows.hpp).
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attncheck/durable_file.hpp"
#include "attncheck/module_suite.hpp"
#include "command.hpp"
#include "module_check.hpp"

namespace attncheck::cli {

namespace fs = std::filesystem;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string g_out = "golden", g_fixtures = "golden/modules";
bool g_update = false, g_verbose = false;

int run_generate() {
  const fs::path dir = fs::path(g_out) / "modules";
  fs::create_directories(dir);
  int written = 0, same = 0, changed = 0;
  for (const ModuleFixture& f : module_suite()) {
    const fs::path path = dir / fixture_file_name(f.name);
    const std::string bytes = module_fixture_image(path.string(), f);
    if (fs::exists(path)) {
      if (read_bytes(path.string()) == bytes) {
        ++same;
        continue;
      }
      if (!g_update) {
        std::printf("differs: %s (--update overwrites)\n", path.c_str());
        ++changed;
        continue;
      }
    }
    write_file_durably(path.string(), bytes);
    ++written;
  }
  std::printf("module fixtures: %d written, %d unchanged, %d differ\n", written, same, changed);
  return changed > 0 ? 1 : 0;
}

int run_module_selftest() {
  std::vector<std::string> files;
  if (!fs::is_directory(g_fixtures)) throw std::invalid_argument("--fixtures: '" + g_fixtures + "' is not a directory");
  for (const auto& e : fs::directory_iterator(g_fixtures))
    if (e.path().extension() == ".h5") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<ModuleFixture> fixtures;
  for (const auto& f : files) fixtures.push_back(read_module_fixture(f));
  if (fixtures.empty()) throw std::invalid_argument("--fixtures: no module fixtures under '" + g_fixtures + "'");
  const auto rows = module_check::selftest(fixtures);
  std::printf("%-34s %-26s %10s %7s %7s\n", "entry", "injected tag", "applicable", "caught", "tagged");
  for (const auto& r : rows) {
    std::printf("%-34s %-26s %10d %7d %7d\n", r.impl.c_str(), r.injected.empty() ? "(correct)" : r.injected.c_str(),
                r.applicable, r.caught, r.tagged);
    for (size_t k = 0; k < r.other_tags.size() && (g_verbose || k < 3); ++k)
      std::printf("    %s\n", r.other_tags[k].c_str());
  }
  const bool ok = module_check::selftest_ok(rows);
  std::printf("module selftest on %zu fixtures: %s\n", fixtures.size(),
              ok ? "every module mutant caught and tagged, no false alarm" : "FAILED");
  return ok ? 0 : 1;
}

const Register reg_gen{
    {"generate-modules", "Write the module golden suite (OUT/modules/, docs/module.md)", [](CLI::App& sub) {
       sub.add_option("--out", g_out, "Output directory; fixtures go to OUT/modules/")->capture_default_str();
       sub.add_flag("--update", g_update, "Overwrite fixtures whose bytes change");
       return std::function<int()>(run_generate);
     }}};
const Register reg_self{
    {"module-selftest", "Every module mutant caught and diagnosed with its tag on the module fixtures",
     [](CLI::App& sub) {
       sub.add_option("--fixtures", g_fixtures, "Directory of module fixtures")->capture_default_str();
       sub.add_flag("--verbose", g_verbose, "Print every unexpected diagnosis");
       return std::function<int()>(run_module_selftest);
     }}};

}  // namespace
}  // namespace attncheck::cli
