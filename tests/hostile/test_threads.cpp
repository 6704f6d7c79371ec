// Hostile machines: a thread the OS refuses (a container's pids limit, RLIMIT_NPROC; simulated by the
// refuse_threads LD_PRELOAD shim) must not end in std::terminate in the reference, the CPU implementations or the
// bench: the work-sharing pools run with the threads they got and the bench (static split) exits 2; a bad
// ATTNCHECK_THREADS (100000, text) is exit 2 naming the variable.
#include <gtest/gtest.h>

#include "../golden/cli_util.hpp"

namespace attncheck {
namespace {

const std::string kCase = "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5";

test::Run with_env(const std::string& env, const std::string& args) {
  return test::run_shell(env + " " + ATTNCHECK_EXE + " " + args);
}

std::string refuse_after(int n) {
  return "LD_PRELOAD=" + std::string(REFUSE_THREADS_SHIM) + " REFUSE_THREADS_AFTER=" + std::to_string(n) +
         " ATTNCHECK_THREADS=8";
}

TEST(Threads, BadThreadCountIsAUsageErrorNamingTheVariable) {
  for (const std::string v : {"100000", "0", "-3", "many", "4x"}) {
    const auto r = with_env("ATTNCHECK_THREADS=" + v, "verify --impl reference --fixtures " + std::string(GOLDEN_DIR) +
                                                          "/cases --filter " + kCase);
    EXPECT_EQ(r.rc, 2) << v << ": " << r.out;
    EXPECT_NE(r.out.find("ATTNCHECK_THREADS: '" + v + "' is not a thread count in 1..4096"), std::string::npos)
        << r.out;
  }
}

TEST(Threads, RefusedThreadsLeaveASmallerPoolForTheReferenceAndTheCpuImplementations) {
  // Two of eight threads start: every case still runs, on two workers, and passes.
  const auto r = with_env(refuse_after(2), "verify --impl reference cpu cpu-flash --fixtures " +
                                               std::string(GOLDEN_DIR) + "/cases --filter " + kCase);
  EXPECT_EQ(r.rc, 0) << r.out;  // not std::terminate (SIGABRT)
  EXPECT_NE(r.out.find("pass 3 "), std::string::npos) << r.out;
  // The reference computing a new fixture (generate, import) the same way.
  const auto dir = test::scratch("threads_gen");
  const auto spec = dir / "one.json";
  FILE* f = std::fopen(spec.c_str(), "w");
  std::fputs(R"({"schema_version": 1, "subdir": "cases", "defaults": {"B": 2, "Hq": 4, "Hkv": 2, "Lq": 13, "Lk": 17,
             "D": 16, "seed": 1, "want_lse": true}, "cases": [{"dtype": "fp32"}]})",
             f);
  std::fclose(f);
  const auto g = with_env(refuse_after(1), "generate --spec " + spec.string() + " --out " + dir.string());
  EXPECT_EQ(g.rc, 0) << g.out;
}

TEST(Threads, NoThreadAtAllIsAnErrorNotAnAbort) {
  const auto r = with_env(refuse_after(0), "bench --impl cpu-flash --shape 1,2,40,33,16 --reps 1 --threads 4");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("could start only 0 of "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ATTNCHECK_THREADS"), std::string::npos) << r.out;
}

TEST(Threads, BenchThreadCountIsBounded) {
  const auto r = with_env("", "bench --impl cpu-flash --shape 1,2,40,33,16 --reps 1 --threads 100000");
  EXPECT_EQ(r.rc, 2) << r.out;  // not an attempt to start 100000 threads
  EXPECT_NE(r.out.find("--threads: must be in 1..4096 (0 = default), got 100000"), std::string::npos) << r.out;
}

TEST(Threads, TheBenchNeedsAllItsThreads) {
  // The bench's SGEMM and FMA peak split work statically over N threads: a partial pool would be a wrong number.
  const auto r = with_env(refuse_after(3), "bench --impl cpu-flash --shape 1,2,40,33,16 --reps 1 --threads 4");
  EXPECT_EQ(r.rc, 2) << r.out;  // not std::terminate (SIGABRT)
  EXPECT_NE(r.out.find("of 4 threads (Resource temporarily unavailable)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace attncheck
