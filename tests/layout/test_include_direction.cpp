// Includes between the top-level folders go one way: reference <- impls, golden <- harness <- tools (impls and
// golden do not include each other). Read from the #include lines of every source and header; an include names a
// file by a path suffix (attncheck/problem.hpp), resolved against every file of the five folders.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::map<std::string, int> kLayer = {{"reference", 0}, {"impls", 1}, {"golden", 1}, {"harness", 2}, {"tools", 3}};

// Known exceptions: (including file, included path) and why it stays.
const std::map<std::pair<std::string, std::string>, std::string> kExceptions = {
    {{"harness/baseline/history.hpp", "attncheck/heatmap.hpp"},
     "tools/heatmap is the PNG writer of `inspect --png`; `history` draws its series with it too. Moving the small "
     "library below harness/ is a build change of its own."},
};

bool is_code(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".cpp" || e == ".hpp" || e == ".h" || e == ".c" || e == ".cu" || e == ".cuh" || e == ".inc";
}

// Every violation under `root`: "FILE:LINE includes PATH (folder -> folder)".
std::vector<std::string> violations(const fs::path& root) {
  std::map<std::string, std::set<std::string>> owners;  // path suffix -> top-level folders holding such a file
  std::vector<std::pair<std::string, std::string>> sources;  // (relative path, folder)
  for (const auto& [top, layer] : kLayer) {
    if (!fs::exists(root / top)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      if (!e.is_regular_file() || !is_code(e.path())) continue;
      const fs::path rel = fs::relative(e.path(), root);
      sources.emplace_back(rel.generic_string(), top);
      std::vector<std::string> parts;
      for (const auto& part : rel) parts.push_back(part.string());
      for (size_t i = 0; i < parts.size(); ++i) {
        std::string suffix;
        for (size_t k = i; k < parts.size(); ++k) suffix += (suffix.empty() ? "" : "/") + parts[k];
        owners[suffix].insert(top);
      }
    }
  }
  const std::regex include(R"(^\s*#\s*include\s*"([^"]+)\")");
  std::vector<std::string> out;
  for (const auto& [file, top] : sources) {
    std::ifstream in(root / file);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.find("include") == std::string::npos) continue;
      std::smatch m;
      if (!std::regex_search(line, m, include)) continue;
      const auto it = owners.find(m[1].str());
      if (it == owners.end() || it->second.count(top)) continue;  // outside the five folders, or its own folder
      for (const std::string& to : it->second) {
        const bool down = kLayer.at(to) < kLayer.at(top);
        if (down || kExceptions.count({file, m[1].str()})) continue;
        out.push_back(file + ":" + std::to_string(n) + " includes " + m[1].str() + " (" + top + " -> " + to + ")");
      }
    }
  }
  return out;
}

}  // namespace

TEST(IncludeDirection, TopLevelFoldersIncludeOneWay) {
  const std::vector<std::string> v = violations(ATTNCHECK_SOURCE_DIR);
  std::string all;
  for (const auto& s : v) all += s + "\n";
  EXPECT_TRUE(v.empty()) << "includes against the direction reference <- impls, golden <- harness <- tools:\n" << all;
}

TEST(IncludeDirection, EveryExceptionStillExists) {  // a stale exception would hide nothing but read as a licence
  for (const auto& [where, why] : kExceptions) {
    std::ifstream in(fs::path(ATTNCHECK_SOURCE_DIR) / where.first);
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    EXPECT_NE(text.find("\"" + where.second + "\""), std::string::npos) << where.first << " no longer includes "
                                                                          << where.second << ": drop the exception";
  }
}

TEST(IncludeDirection, TheCheckSeesAnUpwardInclude) {  // the checker itself, on a tree with one wrong include
  const fs::path root = fs::temp_directory_path() / ("attncheck_layout_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "reference/src");
  fs::create_directories(root / "tools/x/include/attncheck");
  fs::create_directories(root / "impls");
  std::ofstream(root / "tools/x/include/attncheck/cli_thing.hpp") << "#pragma once\n";
  std::ofstream(root / "reference/src/model.cpp") << "#include <vector>\n#include \"attncheck/cli_thing.hpp\"\n";
  std::ofstream(root / "impls/impl.cpp") << "  #  include \"model.cpp\"\n";  // downward: fine
  const std::vector<std::string> v = violations(root);
  fs::remove_all(root);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], "reference/src/model.cpp:2 includes attncheck/cli_thing.hpp (reference -> tools)");
}
