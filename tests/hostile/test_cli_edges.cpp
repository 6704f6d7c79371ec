// Sloppy edges of the CLI: `selftest --cases -3` must not run with the default, nor `verify --shard ''`
// unsharded; stdout must not be block-buffered into a pipe (a killed generate/selftest would show nothing; verify
// flushes its rows), and the build tree's RUNPATH must not end in an empty entry (the current directory searched
// for libraries).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../golden/cli_util.hpp"

namespace attncheck {
namespace {

using test::run;

TEST(CliEdges, SelftestCasesMustBePositive) {
  for (const std::string v : {"-3", "0"}) {
    const auto r = run("selftest --cases " + v);
    EXPECT_EQ(r.rc, 2) << r.out;  // not 0 (a run with the default)
    EXPECT_NE(r.out.find("--cases"), std::string::npos) << r.out;
  }
}

TEST(CliEdges, AnEmptyShardIsAnError) {
  const auto r = run("verify --impl reference --fixtures " + std::string(GOLDEN_DIR) + "/cases --shard ''");
  EXPECT_EQ(r.rc, 2) << r.out;  // not every fixture, unsharded
  EXPECT_NE(r.out.find("--shard: expected I/N with 0 <= I < N (e.g. 0/4), got ''"), std::string::npos) << r.out;
}

TEST(CliEdges, StdoutIsLineBufferedIntoAPipe) {
  // A run killed by a CI timeout or the OOM killer shows what it printed only if each line was written when it was
  // printed. generate prints one line per case: three cases into a pipe must be (at least) three writes to fd 1.
  if (test::run_shell("strace -qq -o /dev/null true").rc != 0)
    GTEST_SKIP() << "strace is not available (or ptrace is not permitted)";
  const auto dir = test::scratch("edges_linebuf");
  const auto spec = dir / "three.json";
  std::ofstream(spec) << R"({"schema_version": 1, "subdir": "cases", "defaults": {"B": 1, "Hq": 1, "Hkv": 1, "Lq": 3,
      "Lk": 5, "D": 4, "seed": 1}, "cases": [{"dtype": "fp32"}, {"dtype": "fp64"}, {"dtype": "fp16"}]})";
  const auto log = dir / "strace.log";
  const auto r = test::run_shell("strace -qq -e trace=write -o " + log.string() + " " + ATTNCHECK_EXE +
                                 " generate --spec " + spec.string() + " --out " + dir.string() + " | cat");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream in(log);
  int writes = 0;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("write(1,", 0) == 0) ++writes;
  EXPECT_GE(writes, 4) << "3 case lines and a summary reached the pipe in " << writes
                       << " write(s): stdout is block-buffered";  // not 1 write at exit
}

TEST(CliEdges, RunpathHasNoEmptyEntry) {
  FILE* p = popen(("readelf -d " + std::string(ATTNCHECK_EXE) + " 2>/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  if (pclose(p) != 0) GTEST_SKIP() << "readelf is not available";
  const auto at = text.find("path: [");
  if (at == std::string::npos) return;  // no RUNPATH at all: nothing searched
  const std::string path = text.substr(at + 7, text.find(']', at) - at - 7);
  EXPECT_FALSE(path.empty() || path.front() == ':' || path.back() == ':' || path.find("::") != std::string::npos)
      << "RUNPATH [" << path << "] has an empty entry: the current directory is searched first";
}

}  // namespace
}  // namespace attncheck
