// OS threads for the reference, the CPU implementations, the emulator and the bench: how many (ATTNCHECK_THREADS,
// checked), and starting them so that a refused thread (a container's pids limit, RLIMIT_NPROC) is an error or
// a smaller pool, never std::terminate from a vector of joinable threads.
#pragma once

#include <cstdint>
#include <functional>

namespace attncheck {
inline namespace plumbing {

// ATTNCHECK_THREADS if set, else the hardware concurrency. Throws std::invalid_argument naming the variable when
// it is set but not an integer in 1..max_threads().
int default_threads();
int max_threads();  // 4096

// What to do when the OS refuses to start some of the threads.
enum class Shortfall {
  fewer,  // run with the threads that started (workers claim work from a shared counter); none started: throw
  fail,   // join those that started, then throw (work split statically, or a measurement of N threads)
};

// Runs worker(w) for w in [0, threads) on new OS threads and joins them all; returns how many ran. An exception
// from a worker is rethrown after the join. A refused thread throws std::runtime_error naming the count, the OS
// error and ATTNCHECK_THREADS (or leaves a smaller pool, per `shortfall`).
int run_on_threads(int threads, const std::function<void(int)>& worker, Shortfall shortfall);

// Run fn(row) for row in [0, n) on `threads` OS threads (0 = default). Each row must be independent.
void parallel_rows(int64_t n, int threads, const std::function<void(int64_t)>& fn);

}  // namespace plumbing
}  // namespace attncheck
