// `generate-modules`: the module suite written byte for byte (see regenerate.hpp).
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attncheck/durable_file.hpp"
#include "attncheck/module_suite.hpp"
#include "attncheck/regenerate.hpp"

namespace attncheck {

RegenerateCounts regenerate_module_suite(const RegenerateOptions& o) {
  namespace fs = std::filesystem;  // local: regenerate.cpp's alias shares a unity-build file with this one
  RegenerateCounts n;
  const fs::path dir = fs::path(o.out) / "modules";
  n.dir = dir.string();
  fs::create_directories(dir);
  for (const ModuleFixture& f : module_suite()) {
    ++n.selected, ++n.built;
    const fs::path path = dir / fixture_file_name(f.name);
    const std::string bytes = module_fixture_image(path.string(), f);
    const bool exists = fs::exists(path);
    if (exists) {
      std::ifstream in(path, std::ios::binary);
      std::ostringstream s;
      s << in.rdbuf();
      if (s.str() == bytes) {
        ++n.same;
        continue;
      }
      if (!o.update) {
        if (o.on_line) o.on_line("differs: " + path.string() + " (--update overwrites)");
        ++n.differ;
        continue;
      }
    }
    write_file_durably(path.string(), bytes);
    ++(exists ? n.updated : n.created);
  }
  return n;
}

}  // namespace attncheck
