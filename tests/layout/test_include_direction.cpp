// Includes between the layers go one way: the reference side's plumbing <- model <- oracle <- tolerance, then
// impls, golden <- harness <- tools (impls and golden do not include each other). Read from the #include lines of
// every source and header; an include names a file by a path suffix (attncheck/problem.hpp), resolved against every
// file of the layers' folders. And each reference layer declares its names in its own inline namespace
// (docs/architecture.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// Each layer's folder and rank: a file may include files of its own folder and of folders of a lower rank.
const std::map<std::string, int> kLayer = {{"reference/plumbing", 0},
                                           {"reference/model", 1},
                                           {"reference/oracle", 2},
                                           {"reference/tolerance", 3},
                                           {"impls", 4},
                                           {"golden", 4},
                                           {"harness", 5},
                                           {"tools", 6}};
const char* const kDirection =
    "reference/plumbing <- reference/model <- reference/oracle <- reference/tolerance <- "
    "impls, golden <- harness <- tools";

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

// Every file of `root/reference` outside the four layer folders (each belongs to one layer).
std::vector<std::string> unlayered(const fs::path& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root / "reference")) {
    if (!e.is_regular_file() || !is_code(e.path())) continue;
    const std::string rel = fs::relative(e.path(), root).generic_string();
    bool in_layer = false;
    for (const auto& [folder, layer] : kLayer) in_layer = in_layer || rel.rfind(folder + "/", 0) == 0;
    if (!in_layer) out.push_back(rel);
  }
  return out;
}

// Every violation under `root`: "FILE:LINE includes PATH (folder -> folder)".
std::vector<std::string> violations(const fs::path& root) {
  std::map<std::string, std::set<std::string>> owners;       // path suffix -> layer folders holding such a file
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
      if (it == owners.end() || it->second.count(top)) continue;  // outside the layers' folders, or its own folder
      for (const std::string& to : it->second) {
        const bool down = kLayer.at(to) < kLayer.at(top);
        if (down || kExceptions.count({file, m[1].str()})) continue;
        out.push_back(file + ":" + std::to_string(n) + " includes " + m[1].str() + " (" + top + " -> " + to + ")");
      }
    }
  }
  return out;
}

// Every `namespace attncheck` block of a reference layer's files that is not the layer's own inline namespace:
// "FILE:LINE: ..." (the block must open `inline namespace LAYER` on its next line, or be `attncheck::inline LAYER::x`).
std::vector<std::string> foreign_namespaces(const fs::path& root) {
  std::vector<std::string> out;
  for (const auto& [folder, rank] : kLayer) {
    if (folder.rfind("reference/", 0) != 0 || !fs::exists(root / folder)) continue;
    const std::string layer = folder.substr(std::string("reference/").size());
    for (const auto& e : fs::recursive_directory_iterator(root / folder)) {
      if (!e.is_regular_file() || !is_code(e.path())) continue;
      std::ifstream in(e.path());
      std::vector<std::string> lines;
      for (std::string line; std::getline(in, line);) lines.push_back(line);
      for (size_t n = 0; n < lines.size(); ++n) {
        const std::string& l = lines[n];
        if (l.rfind("namespace attncheck", 0) != 0 || l.back() != '{') continue;
        const bool own = l == "namespace attncheck {"
                             ? n + 1 < lines.size() && lines[n + 1] == "inline namespace " + layer + " {"
                             : l.rfind("namespace attncheck::inline " + layer + "::", 0) == 0;
        if (!own)
          out.push_back(fs::relative(e.path(), root).generic_string() + ":" + std::to_string(n + 1) + ": " + l +
                        " (not in attncheck::" + layer + ")");
      }
    }
  }
  return out;
}

}  // namespace

TEST(IncludeDirection, LayersIncludeOneWay) {
  const std::vector<std::string> v = violations(ATTNCHECK_SOURCE_DIR);
  std::string all;
  for (const auto& s : v) all += s + "\n";
  EXPECT_TRUE(v.empty()) << "includes against the direction " << kDirection << ":\n" << all;
}

TEST(IncludeDirection, EveryReferenceFileBelongsToALayer) {
  const std::vector<std::string> v = unlayered(ATTNCHECK_SOURCE_DIR);
  std::string all;
  for (const auto& s : v) all += s + "\n";
  EXPECT_TRUE(v.empty()) << "files under reference/ outside its layer folders (plumbing, model, oracle, tolerance):\n"
                         << all;
}

TEST(IncludeDirection, EveryExceptionStillExists) {  // a stale exception would hide nothing but read as a licence
  for (const auto& [where, why] : kExceptions) {
    std::ifstream in(fs::path(ATTNCHECK_SOURCE_DIR) / where.first);
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    EXPECT_NE(text.find("\"" + where.second + "\""), std::string::npos)
        << where.first << " no longer includes " << where.second << ": drop the exception";
  }
}

TEST(IncludeDirection, TheCheckSeesAnUpwardInclude) {  // the checker itself, on a tree with one wrong include
  const fs::path root = fs::temp_directory_path() / ("attncheck_layout_" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (const char* d : {"reference/model/src", "reference/oracle/include/attncheck", "reference/tolerance/src",
                        "tools/x/include/attncheck", "impls"})
    fs::create_directories(root / d);
  std::ofstream(root / "tools/x/include/attncheck/cli_thing.hpp") << "#pragma once\n";
  std::ofstream(root / "reference/oracle/include/attncheck/loops.hpp") << "#pragma once\n";
  std::ofstream(root / "reference/model/src/model.cpp") << "#include <vector>\n#include \"attncheck/cli_thing.hpp\"\n"
                                                           "#include \"attncheck/loops.hpp\"\n";
  std::ofstream(root / "reference/tolerance/src/bound.cpp") << "#include \"attncheck/loops.hpp\"\n";  // downward
  std::ofstream(root / "impls/impl.cpp") << "  #  include \"model.cpp\"\n";                           // downward: fine
  const std::vector<std::string> v = violations(root);
  fs::remove_all(root);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], "reference/model/src/model.cpp:2 includes attncheck/cli_thing.hpp (reference/model -> tools)");
  EXPECT_EQ(v[1], "reference/model/src/model.cpp:3 includes attncheck/loops.hpp (reference/model -> reference/oracle)");
}

TEST(IncludeDirection, EachReferenceLayerHasItsNamespace) {
  const std::vector<std::string> v = foreign_namespaces(ATTNCHECK_SOURCE_DIR);
  std::string all;
  for (const auto& s : v) all += s + "\n";
  EXPECT_TRUE(v.empty()) << "reference code outside its layer's inline namespace:\n" << all;
}

TEST(IncludeDirection, TheCheckSeesAForeignNamespace) {  // the namespace check itself, on a small tree
  const fs::path root = fs::temp_directory_path() / ("attncheck_layout_ns_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "reference/oracle/src");
  std::ofstream(root / "reference/oracle/src/good.cpp") << "namespace attncheck {\ninline namespace oracle {\n}\n}\n"
                                                           "namespace attncheck::inline oracle::detail {\n}\n";
  std::ofstream(root / "reference/oracle/src/bad.cpp") << "namespace attncheck {\nint x;\n}\n"
                                                          "namespace attncheck::inline model::detail {\n}\n";
  std::vector<std::string> v = foreign_namespaces(root);
  fs::remove_all(root);
  std::sort(v.begin(), v.end());
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], "reference/oracle/src/bad.cpp:1: namespace attncheck { (not in attncheck::oracle)");
  EXPECT_EQ(v[1],
            "reference/oracle/src/bad.cpp:4: namespace attncheck::inline model::detail { (not in attncheck::oracle)");
}
