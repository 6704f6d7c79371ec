// cpu-flash's backward keeps no Lq x Lk matrix: its peak extra memory grows with L·D (4x from L = 512 to 2048 at D =
// 128), not L² (16x; one 2048² float matrix alone is 16 MiB). Measured by the bench's peak-RSS probe, one run each.
#include <gtest/gtest.h>

#include "bench_support.hpp"

using namespace attncheck;

TEST(BackwardMemory, CpuFlashGrowsWithLTimesDNotLSquared) {
  const ImplPtr impl = find_impl("cpu-flash");
  ASSERT_TRUE(impl);
  double mib[2] = {0, 0};
  const int64_t lengths[2] = {512, 2048};
  for (int n = 0; n < 2; ++n) {
    bench::Config c;
    c.shape = {1, 1, lengths[n], lengths[n], 128};
    c.threads = 2;
    c.reps = 1;
    c.warmup = 0;
    c.backward = true;
    const bench::Result r = bench::run(*impl, c);
    if (r.extra_rss_bytes < 0) GTEST_SKIP() << "peak RSS not measurable here (/proc/self/clear_refs not writable)";
    mib[n] = r.extra_rss_bytes / (1024.0 * 1024.0);
    std::printf("[backward memory] cpu-flash L=%lld D=128: peak extra RSS %.2f MiB\n",
                static_cast<long long>(lengths[n]), mib[n]);
  }
  EXPECT_LE(mib[1], 8.0 * std::max(mib[0], 0.25));  // L·D: 4x; L²: 16x
  EXPECT_LT(mib[1], 12.0);
}
