// Google Benchmark sweep of the CPU implementations: L in {512..4096}, D in {64, 128}, B·H = 16, fp32 and bf16,
// 1 and 2 threads, causal off/on. Each case reports its median time, GFLOP/s, the same-run SGEMM rate and the
// ratio to it, and the peak extra RSS. `--smoke` runs one tiny case per implementation (used by ctest).
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "bench_support.hpp"

namespace attncheck {
std::vector<ImplPtr> make_cpu_impls();  // impls/cpu (attncheck_backend_cpu)
}

int main(int argc, char** argv) {
  using namespace attncheck;
  bool smoke = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smoke") == 0)
      smoke = true;
    else
      args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());

  const std::vector<int64_t> Ls = smoke ? std::vector<int64_t>{40} : std::vector<int64_t>{512, 1024, 2048, 4096};
  const std::vector<int64_t> Ds = smoke ? std::vector<int64_t>{16} : std::vector<int64_t>{64, 128};
  const int64_t H = smoke ? 2 : 16;  // B = 1, B·H = 16
  static const std::vector<ImplPtr> impls = make_cpu_impls();
  for (const ImplPtr& impl : impls)
    for (DType dt : {DType::f32, DType::bf16})
      for (int64_t D : Ds)
        for (int64_t L : Ls)
          for (bool causal : {false, true})
            for (int threads : {1, 2}) {
              bench::Config c;
              c.shape = {1, H, L, L, D};
              c.dtype = dt;
              c.causal = causal;
              c.threads = threads;
              c.warmup = 1;
              c.reps = smoke ? 1 : 3;
              const std::string name = impl->name() + "/" + to_string(dt) + "/L" + std::to_string(L) + "/D" +
                                       std::to_string(D) + (causal ? "/causal" : "/full") +
                                       "/threads:" + std::to_string(threads);
              benchmark::RegisterBenchmark(name.c_str(),
                                           [impl, c](benchmark::State& st) {
                                             const bench::Result r = bench::run(*impl, c);
                                             for (auto _ : st) st.SetIterationTime(r.seconds);
                                             st.counters["GFLOPs"] = r.gflops;
                                             st.counters["SGEMM_GFLOPs"] = r.sgemm_gflops;
                                             st.counters["ratio"] = r.ratio_to_sgemm;
                                             st.counters["extra_MiB"] = r.extra_rss_bytes / (1024.0 * 1024.0);
                                             st.counters["cpu_ratio"] = r.cpu_ratio_to_sgemm;
                                           })
                  ->UseManualTime()
                  ->Iterations(1)
                  ->Unit(benchmark::kMillisecond);
            }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
