// Module fixtures on the command line (docs/module.md): `generate-modules` writes the module golden suite
// (golden/modules/) byte for byte from module_suite.cpp (golden's regenerate.hpp), and `module-selftest` shows every
// module mutant caught and diagnosed with its tag on those fixtures (harness/module; verify judges module fixtures:
// harness/verify/module_rows.hpp). This file parses the options and prints.
#include <cstdio>

#include "attncheck/module_fixture.hpp"
#include "attncheck/regenerate.hpp"
#include "command.hpp"
#include "module_check.hpp"

namespace attncheck::cli {
namespace {

std::string g_out = "golden", g_fixtures = "golden/modules";
bool g_update = false, g_verbose = false;

int run_generate() {
  RegenerateOptions o;
  o.out = g_out, o.update = g_update;
  o.on_line = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
  const RegenerateCounts n = regenerate_module_suite(o);
  std::printf("module fixtures: %d written, %d unchanged, %d differ\n", n.created + n.updated, n.same, n.differ);
  return n.differ > 0 ? 1 : 0;
}

int run_module_selftest() {
  const std::vector<ModuleFixture> fixtures = read_module_fixture_dir(g_fixtures);
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
