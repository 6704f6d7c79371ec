// Module fixtures on the command line (docs/module.md): `generate-modules` writes the module golden suite
// (golden/modules/) byte for byte from module_suite.cpp, `module-selftest` shows every module mutant caught and
// diagnosed with its tag on those fixtures, and module_rows judges a module fixture inside `verify`.
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attncheck/durable_file.hpp"
#include "attncheck/module_suite.hpp"
#include "command.hpp"
#include "gradients.hpp"
#include "module_check.hpp"
#include "module_rows.hpp"

namespace attncheck::cli {

namespace fs = std::filesystem;

std::string module_case_name(const std::string& file) {
  try {
    return read_module_fixture(file).name;
  } catch (const std::exception&) {
    return "";
  }
}

bool module_fixture_has_gradients(const std::string& file) {
  try {
    return read_module_fixture(file).grad.has_value();
  } catch (const std::exception&) {
    return false;
  }
}

namespace {
// The "<impl>/backward" row of a module fixture with gradients.
ModuleRow backward_module_row(const ModuleFixture& f, const std::string& file, const Impl& impl, const Support& avail,
                              bool diagnose, double tol_scale, std::optional<ModuleGradients>& tol) {
  ModuleRow mr{unjudged(f.name, file, backward_label(impl.name())), {}};
  CaseResult& r = mr.row;
  const ModuleImplPtr entry = find_module_entry(impl);
  if (!avail.ok) {
    r.status = Status::unavailable, r.message = "unavailable: " + avail.reason;
  } else if (!entry) {
    r.status = Status::unsupported, r.message = "module: " + impl.name() + " has no module entry";
  } else {
    try {
      ModuleGradOutputs g;
      const Support s = run_module_backward(*entry, f.problem, f.inputs, *f.dy, g);
      if (!s.ok) {
        r.status = Status::unsupported, r.message = "module: " + s.reason;
      } else {
        if (!tol) tol = module_grad_tolerance(f.problem, f.inputs, f.dy->to_double());
        r = judged_result(f.name, file, backward_label(impl.name()), module_check::judge_backward(f, *tol, g, tol_scale));
        if (diagnose && r.status == Status::fail) {
          std::string tags;
          for (const std::string& t : module_check::diagnose_backward(f, g)) tags += (tags.empty() ? "" : " ") + t;
          mr.lines.push_back("diagnosis: " + (tags.empty() ? std::string("(no module backward fault explains it)") : tags));
        }
      }
    } catch (const std::exception&) {
      record_exception(r);
    }
  }
  describe_problem(r, f.problem.attn);
  r.features.push_back("module");
  return mr;
}
}  // namespace

std::vector<ModuleRow> module_rows(const std::string& file, const std::vector<ImplPtr>& impls,
                                   const std::vector<Support>& avail, bool diagnose, double tol_scale, bool forward,
                                   bool backward) {
  ModuleFixture f;
  try {
    f = read_module_fixture(file);
  } catch (const std::exception& e) {
    return {ModuleRow{input_error(file, e.what()), {}}};
  }
  std::vector<ModuleRow> rows;
  std::optional<ModuleGradients> gtol;  // computed once, when a backward is judged
  if (backward && f.grad)
    for (size_t i = 0; i < impls.size(); ++i)
      rows.push_back(backward_module_row(f, file, *impls[i], avail[i], diagnose, tol_scale, gtol));
  if (!forward) return rows;
  const ModuleTolerance tol = module_tolerance(f.problem, f.inputs);
  for (size_t i = 0; i < impls.size(); ++i) {
    ModuleRow mr{unjudged(f.name, file, impls[i]->name()), {}};
    CaseResult& r = mr.row;
    const ModuleImplPtr entry = find_module_entry(*impls[i]);
    if (!avail[i].ok) {
      r.status = Status::unavailable, r.message = "unavailable: " + avail[i].reason;
    } else if (!entry) {
      r.status = Status::unsupported, r.message = "module: " + impls[i]->name() + " has no module entry";
    } else {
      try {
        ModuleOutputs out;
        const Support s = run_module(*entry, f.problem, f.inputs, out);
        if (!s.ok) {
          r.status = Status::unsupported, r.message = "module: " + s.reason;
        } else {
          r = judged_result(f.name, file, impls[i]->name(), module_check::judge(f, tol, out, tol_scale));
          if (diagnose && r.status == Status::fail) {
            std::string tags;
            for (const std::string& t : module_check::diagnose(f, out)) tags += (tags.empty() ? "" : " ") + t;
            mr.lines.push_back("diagnosis: " + (tags.empty() ? std::string("(no module fault explains it)") : tags));
          }
        }
      } catch (const std::exception&) {
        record_exception(r);
      }
    }
    describe_problem(r, f.problem.attn);
    r.features.push_back("module");
    rows.push_back(std::move(mr));
  }
  return rows;
}

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
    for (size_t k = 0; k < r.other_tags.size() && (g_verbose || k < 3); ++k) std::printf("    %s\n", r.other_tags[k].c_str());
  }
  const bool ok = module_check::selftest_ok(rows);
  std::printf("module selftest on %zu fixtures: %s\n", fixtures.size(),
              ok ? "every module mutant caught and tagged, no false alarm" : "FAILED");
  return ok ? 0 : 1;
}

const Register reg_gen{{"generate-modules", "Write the module golden suite (OUT/modules/, docs/module.md)", [](CLI::App& sub) {
                          sub.add_option("--out", g_out, "Output directory; fixtures go to OUT/modules/")->capture_default_str();
                          sub.add_flag("--update", g_update, "Overwrite fixtures whose bytes change");
                          return std::function<int()>(run_generate);
                        }}};
const Register reg_self{{"module-selftest", "Every module mutant caught and diagnosed with its tag on the module fixtures",
                         [](CLI::App& sub) {
                           sub.add_option("--fixtures", g_fixtures, "Directory of module fixtures")->capture_default_str();
                           sub.add_flag("--verbose", g_verbose, "Print every unexpected diagnosis");
                           return std::function<int()>(run_module_selftest);
                         }}};

}  // namespace
}  // namespace attncheck::cli
