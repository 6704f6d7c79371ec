// Bad input found by review, each exit 2 with a message naming the file and the field, never a crash, a wasted run
// or a leftover temporary: specs with overflowing or oversized cases, malformed spec shapes, a generate that fails
// midway, report paths that cannot be written, directories where a file is expected.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attncheck/fixture.hpp"
#include "cli_util.hpp"

namespace attncheck {
namespace {

namespace fs = std::filesystem;
using test::run;

size_t files_in(const fs::path& dir) {
  if (!fs::exists(dir)) return 0;
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

// B = Hq = Hkv = 2^32 overflowed int64 element counts and segfaulted; a valid but 1e17-byte case died in
// std::bad_alloc. Both are rejected while the spec is read, so not even the good first case is written.
TEST(GenerateErrors, OverflowingOrOversizedCaseExits2BeforeWritingAnything) {
  const fs::path dir = test::scratch("gen_huge");
  std::ofstream(dir / "ovf.json") << R"({"schema_version": 1, "subdir": "c", "cases": [{"Lq": 3, "Lk": 3, "D": 2},
      {"B": 4294967296, "Hq": 4294967296, "Hkv": 4294967296, "Lq": 2, "Lk": 2, "D": 1}]})";
  auto r = run("generate --spec " + (dir / "ovf.json").string() + " --out " + dir.string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("ovf.json: cases[1]: q elements B*Hq*Lq*Dqk exceed 2^60"), std::string::npos) << r.out;
  std::ofstream(dir / "big.json") << R"({"schema_version": 1, "subdir": "c", "cases": [{"Lq": 3, "Lk": 3, "D": 2},
      {"B": 1024, "Hq": 1024, "Hkv": 1024, "Lq": 1048576, "Lk": 1048576, "D": 1024}]})";
  r = run("generate --spec " + (dir / "big.json").string() + " --out " + dir.string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("big.json: cases[1]: size: fp32/B1024-Hq1024-Hkv1024-Lq1048576-Lk1048576-D1024/plain needs"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("bytes in memory, more than the memory budget of"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(raise it with --max-memory)"), std::string::npos) << r.out;
  EXPECT_EQ(files_in(dir / "c"), 0u);
}

TEST(GenerateErrors, MalformedSpecShapesExit2NamingFileAndField) {
  const fs::path dir = test::scratch("gen_shapes");
  const struct {
    const char* file;
    const char* text;
    const char* message;
  } cases[] = {
      {"list.json", "[]", "list.json: must be a JSON object with \"cases\", got array"},
      // nlohmann reports a number beyond double's range as out_of_range, not parse_error
      {"overflow.json", R"({"schema_version": 1, "cases": [{"Lq": 1e999}]})",
       "overflow.json: not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e999'"},
      {"subdir.json", R"({"schema_version": 1, "subdir": 5, "cases": []})", "subdir.json: subdir: must be a string"},
      {"defaults.json", R"({"schema_version": 1, "defaults": [1], "cases": []})",
       "defaults.json: defaults: must be an object"},
      {"version.json", R"({"schema_version": "1", "cases": []})", "version.json: schema_version: must be 1"},
      {"number.json", R"({"schema_version": 1, "cases": [3]})", "number.json: cases[0]: must be an object, got 3"},
      {"nodtype.json", R"({"schema_version": 1, "cases": [{"dtype": []}]})",
       "nodtype.json: cases[0]: dtype: an empty list makes no case"},
      {"hidden.json", R"({"schema_version": 1, "cases": [{"name": "../x"}]})",
       "hidden.json: cases[0]: name: '../x' would be written as the hidden file .._x.h5, which verify skips"},
  };
  for (const auto& c : cases) {
    std::ofstream(dir / c.file) << c.text;
    const auto r = run("generate --spec " + (dir / c.file).string() + " --out " + (dir / "out").string());
    EXPECT_EQ(r.rc, 2) << c.file << ": " << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.file << ": " << r.out;
  }
  const auto r = run("generate --spec " + dir.string() + " --out " + (dir / "out").string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(dir.string() + ": is a directory"), std::string::npos) << r.out;
  EXPECT_EQ(files_in(dir / "out"), 0u);
}

// A case that fails after its fixture was written (here: a directory sits where the file goes) must not leave the
// hidden temporary ".<file>.new.tmp" behind, and its message names the file in the way. Earlier cases stay written.
TEST(GenerateErrors, FailingMidwayKeepsEarlierFilesAndLeavesNoTemporary) {
  const fs::path dir = test::scratch("gen_midway");
  const fs::path blocker = dir / "c" / "fp32_B1-Hq1-Hkv1-Lq4-Lk3-D2_plain_normal.h5";
  fs::create_directories(blocker);
  std::ofstream(dir / "s.json") << R"({"schema_version": 1, "subdir": "c", "cases": [{"Lq": 3, "Lk": 3, "D": 2},
      {"Lq": 4, "Lk": 3, "D": 2}, {"Lq": 5, "Lk": 3, "D": 2}]})";
  const auto r = run("generate --spec " + (dir / "s.json").string() + " --out " + dir.string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(blocker.string() + ": exists and is not a regular file"), std::string::npos) << r.out;
  EXPECT_NO_THROW(read_fixture((dir / "c" / "fp32_B1-Hq1-Hkv1-Lq3-Lk3-D2_plain_normal.h5").string()));
  for (const auto& e : fs::directory_iterator(dir / "c"))
    EXPECT_NE(e.path().filename().string()[0], '.') << "temporary left behind: " << e.path();
}

// The report path is tried before any case runs, not after every case has run (and the table printed).
TEST(VerifyErrors, UnwritableReportIsRejectedBeforeAnyCaseRuns) {
  const std::string base = "verify --impl reference --fixtures " + std::string(GOLDEN_DIR) + "/cases --report ";
  const fs::path dir = test::scratch("report_dir");
  fs::create_directories(dir / "d.json");
  for (const auto& [path, message] :
       {std::pair<std::string, std::string>{"/nonexistent/dir/r.json", "directory '/nonexistent/dir' does not exist"},
        {(dir / "d.json").string(), "is a directory"}}) {
    const auto r = run(base + path);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find(path), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("results:"), std::string::npos) << "cases ran before the report path was checked:\n" << r.out;
  }
}

// A case name with bytes that are not UTF-8 (fixture names are whatever the file holds) made the JSON report throw
// after the whole run (exit 2, no report) and the JUnit XML ill-formed.
TEST(VerifyErrors, ReportsStayWellFormedForNonUtf8CaseNames) {
  const fs::path dir = test::scratch("non_utf8");
  Fixture f = read_fixture(test::golden_case("fp32_B1-Hq1-Hkv1-Lq1-Lk1-D1_plain_normal.h5"));
  f.name = "bad\xff\xc3name";
  write_fixture((dir / "x.h5").string(), f);
  for (const char* report : {"r.json", "r.xml"}) {
    const auto r = run("verify --impl reference --fixtures " + dir.string() + " --report " + (dir / report).string());
    EXPECT_EQ(r.rc, 0) << r.out;
  }
  std::ifstream js(dir / "r.json");
  const auto j = nlohmann::json::parse(js, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "r.json does not parse";
  EXPECT_EQ(j["cases"][0]["fixture"], "bad\xEF\xBF\xBD\xEF\xBF\xBDname");
  const std::string py =
      "/usr/bin/python3 -c \"import xml.etree.ElementTree as E; E.parse('" + (dir / "r.xml").string() + "')\"";
  EXPECT_EQ(std::system(py.c_str()), 0) << "r.xml is not well-formed";
}

TEST(InputErrors, ADirectoryWhereAFixtureIsExpectedIsNamedAsSuch) {
  const std::string cases = std::string(GOLDEN_DIR) + "/cases";
  const std::string fixture = test::golden_case("fp32_B1-Hq1-Hkv1-Lq1-Lk1-D1_plain_normal.h5");
  for (const std::string& cmd : {"inspect " + cases, "compare --expected " + cases + " --actual " + fixture,
                                 "compare --expected " + fixture + " --actual " + cases}) {
    const auto r = run(cmd);
    EXPECT_EQ(r.rc, 2) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find(cases + ": file: is a directory, expected an HDF5 file"), std::string::npos)
        << cmd << ": " << r.out;
  }
}

}  // namespace
}  // namespace attncheck
