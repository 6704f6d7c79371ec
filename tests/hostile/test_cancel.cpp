// Ctrl-C and SIGTERM on long runs: the run stops at its next step with exit 128 + signal, and leaves no
// partial file: every fixture written so far is whole (byte-identical to the checked-in one), no report, no
// temporary. Progress is drawn on stderr only when it is a terminal (a pty through script(1)), never into a pipe.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>

#include "../golden/cli_util.hpp"

extern char** environ;

namespace attncheck {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// Starts attncheck with `args`, stdout and stderr into files of `dir`; returns its PID.
pid_t start(const std::vector<std::string>& args, const fs::path& dir) {
  std::vector<std::string> argv{ATTNCHECK_EXE};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> p;
  for (auto& a : argv) p.push_back(a.data());
  p.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, (dir / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, (dir / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, ATTNCHECK_EXE, &fa, nullptr, p.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Waits (up to 120 s) until `ready` holds, then sends `sig`; returns the exit code (-1: not a normal exit).
template <class F>
int interrupt_when(pid_t pid, F ready, int sig) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int st = 0;
  while (!ready() && std::chrono::steady_clock::now() < until) {
    if (waitpid(pid, &st, WNOHANG) == pid) return -2;  // finished before it could be interrupted
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, sig);
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().ends_with(".tmp")) v.push_back(e.path().string());
  return v;
}

TEST(Cancel, CtrlCDuringGenerateLeavesOnlyWholeFixtures) {
  const fs::path dir = test::scratch("cancel_generate");
  const fs::path out = dir / "out";
  const pid_t pid = start({"generate", "--spec", std::string(GOLDEN_DIR) + "/suite.json", "--out", out.string()}, dir);
  auto written = [&] {
    size_t n = 0;
    std::error_code ec;
    for (fs::directory_iterator it(out / "cases", ec), end; !ec && it != end; it.increment(ec))
      n += it->path().extension() == ".h5";
    return n;
  };
  const int rc = interrupt_when(
      pid, [&] { return written() >= 2; }, SIGINT);
  const std::string err = slurp(dir / "stderr");
  ASSERT_NE(rc, -2) << "generate finished before the signal";
  EXPECT_EQ(rc, 130) << err;
  EXPECT_NE(err.find("interrupted by SIGINT before "), std::string::npos) << err;
  size_t total = 0;
  for (const auto& e : fs::directory_iterator(std::string(GOLDEN_DIR) + "/cases"))
    total += e.path().extension() == ".h5";
  const size_t n = written();
  EXPECT_GE(n, 2u);
  EXPECT_LT(n, total) << "not interrupted";
  for (const auto& e : fs::directory_iterator(out / "cases"))  // each written fixture is whole
    EXPECT_EQ(slurp(e.path()), slurp(fs::path(GOLDEN_DIR) / "cases" / e.path().filename())) << e.path();
  EXPECT_TRUE(temporaries(dir).empty()) << temporaries(dir).front();
}

TEST(Cancel, SigtermDuringVerifyWritesNoReport) {
  const fs::path dir = test::scratch("cancel_verify");
  const fs::path report = dir / "report.json";
  const pid_t pid = start({"verify", "--impl", "reference", "cpu", "--fixtures", std::string(GOLDEN_DIR) + "/cases",
                           "--report", report.string()},
                          dir);
  const int rc = interrupt_when(
      pid, [&] { return slurp(dir / "stdout").find("PASS ") != std::string::npos; }, SIGTERM);
  const std::string err = slurp(dir / "stderr");
  ASSERT_NE(rc, -2) << "verify finished before the signal";
  EXPECT_EQ(rc, 143) << err;
  EXPECT_NE(err.find("interrupted by SIGTERM before "), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(report));  // half a run is not a report
  EXPECT_TRUE(temporaries(dir).empty()) << temporaries(dir).front();
}

// A step stuck inside a call that never returns (a plugin's kernel in this process, pause() in a loop) cannot reach
// its next step: the signal still ends the run within 2 s with 128 + signal, and no report.
TEST(Cancel, SigtermEndsAStepStuckInALibraryCall) {
  for (const int sig : {SIGTERM, SIGINT}) {
    const fs::path dir = test::scratch(sig == SIGTERM ? "cancel_stuck_term" : "cancel_stuck_int");
    const fs::path report = dir / "report.json";
    const pid_t pid =
        start({"verify", "--in-process", "--plugin", HOSTILE_HANG_PLUGIN, "--impl", "hostile-hang", "--fixtures",
               std::string(GOLDEN_DIR) + "/cases", "--filter", "fp32/B1-Hq1-*-Lq15-*", "--report", report.string()},
              dir);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (slurp(dir / "stderr").find("misbehaving") == std::string::npos && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_NE(slurp(dir / "stderr").find("misbehaving"), std::string::npos) << "the plugin never reached its hang";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // inside pause()
    const auto sent = std::chrono::steady_clock::now();
    kill(pid, sig);
    int st = 0;
    pid_t done = 0;
    while ((done = waitpid(pid, &st, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() - sent < std::chrono::seconds(10))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
    if (done == 0) {  // still stuck: end it, and fail
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
    }
    const std::string err = slurp(dir / "stderr");
    ASSERT_EQ(done, pid) << "still running 10 s after the signal: " << err;
    ASSERT_TRUE(WIFEXITED(st)) << err;
    EXPECT_EQ(WEXITSTATUS(st), 128 + sig) << err;
    EXPECT_LT(took, 2.0) << err;
    EXPECT_FALSE(fs::exists(report));
    EXPECT_TRUE(temporaries(dir).empty()) << temporaries(dir).front();
  }
}

TEST(Cancel, ProgressOnlyOnATerminal) {
  const fs::path dir = test::scratch("cancel_progress");
  const std::string spec = std::string(GOLDEN_DIR) + "/suite.json";
  const std::string gen = std::string(ATTNCHECK_EXE) + " generate --spec " + spec + " --out " + dir.string();
  const auto piped = test::run_shell(gen);  // stderr into a pipe
  ASSERT_EQ(piped.rc, 0) << piped.out;
  EXPECT_EQ(piped.out.find("\033[K"), std::string::npos) << "progress drawn into a pipe";
  if (test::run_shell("script -qec true /dev/null").rc != 0) GTEST_SKIP() << "script(1) is not available";
  const auto tty = test::run_shell("script -qec '" + gen + "' /dev/null");  // stderr on a pty
  ASSERT_EQ(tty.rc, 0) << tty.out;
  EXPECT_NE(tty.out.find("\033[K[#"), std::string::npos) << "no progress bar on a terminal";
}

}  // namespace
}  // namespace attncheck
