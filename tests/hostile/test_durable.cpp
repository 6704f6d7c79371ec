// Durable writes: a full disk is an error naming the file (not a SIGSEGV at exit after HDF5 closes a file whose
// flush failed, twice), every file attncheck writes is fsynced, renamed and its
// directory fsynced (checked with strace), and temporaries of dead processes are removed by the next write.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "../golden/cli_util.hpp"
#include "attncheck/durable_file.hpp"

namespace attncheck {
namespace {

namespace fs = std::filesystem;
using test::run;

const std::string kCase = "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5";

std::string one_case_spec(const fs::path& dir) {
  const fs::path spec = dir / "one.json";
  std::ofstream(spec) << R"({"schema_version": 1, "subdir": "cases",
    "defaults": {"B": 2, "Hq": 4, "Hkv": 2, "Lq": 13, "Lk": 17, "D": 16, "seed": 1, "want_lse": true},
    "cases": [{"dtype": ["fp32", "fp16"]}]})";
  return spec.string();
}

// One golden case through the reference: a run that writes a report.
std::string verify_args() {
  return "verify --impl reference --fixtures " + std::string(GOLDEN_DIR) + "/cases --filter " + kCase;
}

// Runs `sh -c SCRIPT`; rc is -1 when the shell dies by a signal and 128+n when attncheck did (exec'd).
test::Run shell(const std::string& script) { return test::run_shell("sh -c '" + script + "'"); }

std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().ends_with(".tmp")) v.push_back(e.path().string());
  return v;
}

TEST(Durable, GenerateOnAFullDiskIsAnErrorNamingTheFileNotACrash) {
  // RLIMIT_FSIZE stands in for a full disk: writes beyond 64 KiB fail (EFBIG) once SIGXFSZ is ignored.
  const fs::path dir = test::scratch("durable_full");
  const std::string spec = one_case_spec(dir);
  const auto r = shell("trap \"\" XFSZ; ulimit -f 64; exec " + std::string(ATTNCHECK_EXE) + " generate --spec " + spec +
                       " --out " + (dir / "out").string());
  EXPECT_EQ(r.rc, 2) << r.out;  // not SIGSEGV (shell status 139)
  EXPECT_NE(r.out.find("fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5: writing the temporary"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("File too large"), std::string::npos) << r.out;
  EXPECT_TRUE(leftovers(dir / "out").empty()) << leftovers(dir / "out").front();
  EXPECT_FALSE(fs::exists(dir / "out/cases/fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5"));
}

TEST(Durable, TemporariesOfDeadProcessesAreRemovedByTheNextWrite) {
  const fs::path dir = test::scratch("durable_stale");
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // a PID that no longer runs
  const fs::path dead = dir / (".x.h5.attncheck-" + std::to_string(child) + ".tmp");
  const fs::path live = dir / (".y.h5.attncheck-" + std::to_string(::getpid()) + ".tmp");
  const fs::path other = dir / ".notes.1234.tmp";  // not ours: never touched
  for (const auto& p : {dead, live, other}) std::ofstream(p) << "half a file";
  write_file_durably((dir / "z.txt").string(), "complete");
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  std::ifstream in(dir / "z.txt");
  std::string s;
  in >> s;
  EXPECT_EQ(s, "complete");
  // Through the CLI too: a report written into a directory holding a dead process's temporary removes it.
  std::ofstream(dead) << "half a report";
  const auto r = run(verify_args() + " --report " + (dir / "r.json").string());
  EXPECT_FALSE(fs::exists(dead)) << r.out;
}

// Checks in an strace log that `target` was written as temporary -> fsync -> rename -> fsync of its directory.
void expect_durable(const std::string& log, const fs::path& target) {
  std::istringstream in(log);
  std::string line, tmp;
  std::map<std::string, std::string> fd_path;  // fd -> path of its openat
  bool file_synced = false, renamed = false, dir_synced = false;
  const std::regex open_re(R"re(openat\(AT_FDCWD, "([^"]+)",.*\) = (\d+))re"), fsync_re(R"(fsync\((\d+)\))"),
      rename_re(R"re(rename\("([^"]+)", "([^"]+)"\) = 0)re");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, open_re)) {
      fd_path[m[2]] = m[1];
    } else if (std::regex_search(line, m, fsync_re)) {
      const std::string p = fd_path[m[1]];
      if (!renamed && p.find(".attncheck-") != std::string::npos &&
          p.find(target.filename().string()) != std::string::npos) {
        file_synced = true;
        tmp = p;
      }
      if (renamed && fs::path(p) == target.parent_path()) dir_synced = true;
    } else if (std::regex_search(line, m, rename_re) && fs::path(m[2].str()) == target) {
      EXPECT_EQ(m[1].str(), tmp) << "renamed from a file that was not fsynced first";
      renamed = file_synced;
    }
  }
  EXPECT_TRUE(file_synced) << target << ": no fsync of its temporary\n" << log;
  EXPECT_TRUE(renamed) << target << ": not renamed into place after the fsync";
  EXPECT_TRUE(dir_synced) << target << ": its directory was not fsynced after the rename";
}

std::string straced(const fs::path& dir, const std::string& args) {
  const fs::path log = dir / "strace.log";
  const auto r = shell("strace -f -qq -e trace=openat,fsync,rename -o " + log.string() + " " +
                       std::string(ATTNCHECK_EXE) + " " + args);
  EXPECT_NE(r.rc, 2) << r.out;
  std::ifstream in(log);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Durable, FixturesReportsAndPngsAreFsyncedRenamedAndTheirDirectoryFsynced) {
  if (shell("strace -qq -o /dev/null true").rc != 0)
    GTEST_SKIP() << "strace is not available (or ptrace is not permitted)";
  const fs::path dir = test::scratch("durable_strace");
  const std::string spec = one_case_spec(dir);
  expect_durable(straced(dir, "generate --spec " + spec + " --out " + dir.string()), dir / "cases" / kCase);
  expect_durable(straced(dir, verify_args() + " --report " + (dir / "r.json").string()), dir / "r.json");
  expect_durable(straced(dir, verify_args() + " --report " + (dir / "r.xml").string()), dir / "r.xml");
  expect_durable(straced(dir, "inspect " + test::golden_case(kCase) + " --png " + (dir / "h.png").string()),
                 dir / "h.png");
}

}  // namespace
}  // namespace attncheck
