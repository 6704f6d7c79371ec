// A failing (shrunk) property case written as a golden fixture: inputs exactly as the implementation received them,
// the reference's expected outputs, the seed, and in `command` the property, the failing implementation, the
// failure message and the spec string that rebuilds the case. `attncheck verify --fixtures attncheck-regressions`
// replays it against every implementation.
#include "regression.hpp"

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "attncheck/fixture.hpp"

namespace attncheck::prop {

std::string regressions_dir() {
  if (const char* e = std::getenv("ATTNCHECK_REGRESSIONS_DIR"); e && *e) return e;
  return "attncheck-regressions";
}

std::string write_regression(const Case& c, const std::string& impl, const std::string& property,
                             const std::string& message, uint64_t seed) {
  try {
    Provenance prov;
    prov.seed = c.spec.seed;
    prov.distribution = to_string(c.spec.values);
    prov.command = "property " + property + " failed on impl " + impl + " (rapidcheck seed " + std::to_string(seed) +
                   "): " + message;
    const std::string name = "regression/" + property + "/" + impl + "/" + c.name();
    const Fixture f = make_fixture(name, c.p, c.in, prov);
    const std::filesystem::path dir = regressions_dir();
    std::filesystem::create_directories(dir);
    const std::string path = (dir / fixture_file_name(name)).string();
    write_fixture(path, f);
    return path;
  } catch (const std::exception& e) {
    std::cerr << "could not write the regression fixture: " << e.what() << "\n";
    return "";
  }
}

}  // namespace attncheck::prop
