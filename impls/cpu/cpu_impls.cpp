// The CPU backend's entry point for the registry, and the thread pool both CPU implementations share.
#include <cstdlib>

#include "cpu_common.hpp"
#include "attncheck/reference.hpp"
#include "cpu_backward.hpp"
#include "cpu_impls.hpp"

namespace attncheck {

std::vector<ImplPtr> make_cpu_impls() {
  return {cpu::with_backward(cpu::make_dense_impl(), cpu::BackwardAlgo::dense),
          cpu::with_backward(cpu::make_flash_impl(), cpu::BackwardAlgo::flash)};
}

namespace cpu {

int cpu_threads() { return default_threads(); }  // ATTNCHECK_THREADS or the hardware concurrency, as the reference

void parallel_tasks(int64_t n, int threads, const std::function<void(int64_t, int)>& fn) {
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(n, 1)));
  if (threads == 1) {
    for (int64_t t = 0; t < n; ++t) fn(t, 0);
    return;
  }
  // Tasks are claimed from a shared counter, so a pool the OS made smaller still runs every task.
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  run_on_threads(
      threads,
      [&](int w) {
        for (int64_t t; !failed && (t = next.fetch_add(1)) < n;) {
          try {
            fn(t, w);
          } catch (...) {
            failed = true;
            throw;
          }
        }
      },
      Shortfall::fewer);
}

}  // namespace cpu
}  // namespace attncheck
