// default_threads, run_on_threads and parallel_rows (threads.hpp); the schedule of a run (schedule.hpp), which sets the
// threads.
#include "attncheck/threads.hpp"

#include "attncheck/schedule.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace attncheck {
inline namespace plumbing {

int max_threads() { return 4096; }

namespace {
thread_local Schedule g_schedule;
}  // namespace

const Schedule& current_schedule() { return g_schedule; }
ScheduleScope::ScheduleScope(const Schedule& s) : saved_(g_schedule) { g_schedule = s; }
ScheduleScope::~ScheduleScope() { g_schedule = saved_; }

const char* knob_name(ScheduleKnob k) {
  switch (k) {
    case knob_threads: return "threads";
    case knob_num_splits: return "num_splits";
    case knob_block_order: return "block_order";
  }
  return "?";
}

ScheduleKnob knob_from_string(const std::string& s) {
  for (ScheduleKnob k : {knob_threads, knob_num_splits, knob_block_order})
    if (s == knob_name(k)) return k;
  throw std::invalid_argument("schedule knob '" + s + "' (expected threads, num_splits or block_order)");
}

std::string knob_list(unsigned knobs) {
  std::string s;
  for (ScheduleKnob k : {knob_threads, knob_num_splits, knob_block_order})
    if (knobs & k) s += (s.empty() ? "" : ", ") + std::string(knob_name(k));
  return s.empty() ? "none" : s;
}

std::string Schedule::describe() const {
  std::vector<std::string> parts;
  if (threads) parts.push_back("threads=" + std::to_string(threads));
  if (num_splits) parts.push_back("num_splits=" + std::to_string(num_splits));
  if (reversed) parts.emplace_back("block_order=reversed");
  std::string s;
  for (const std::string& x : parts) {
    if (!s.empty()) s += ',';
    s += x;
  }
  return s.empty() ? "default" : s;
}

int default_threads() {
  if (current_schedule().threads > 0) return current_schedule().threads;  // a schedule check's setting
  if (const char* e = std::getenv("ATTNCHECK_THREADS")) {
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(e, &end, 10);
    if (end == e || *end != '\0' || errno != 0 || n < 1 || n > max_threads())
      throw std::invalid_argument("ATTNCHECK_THREADS: '" + std::string(e) + "' is not a thread count in 1.." +
                                  std::to_string(max_threads()) + " (unset it to use all " +
                                  std::to_string(std::thread::hardware_concurrency()) + " cores)");
    return static_cast<int>(n);
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc ? static_cast<int>(hc) : 1;
}

int run_on_threads(int threads, const std::function<void(int)>& worker, Shortfall shortfall) {
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::mutex error_mutex;
  std::string refused;
  pool.reserve(static_cast<size_t>(std::max(threads, 0)));
  for (int w = 0; w < threads; ++w) {
    try {
      pool.emplace_back([&, w] {
        try {
          worker(w);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) error = std::current_exception();
        }
      });
    } catch (const std::system_error& e) {  // EAGAIN: the OS refused the thread
      refused = "could start only " + std::to_string(w) + " of " + std::to_string(threads) + " threads (" +
                e.code().message() + "); lower ATTNCHECK_THREADS or raise the process limit";
      break;
    }
  }
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  if (!refused.empty() && (shortfall == Shortfall::fail || pool.empty())) throw std::runtime_error(refused);
  return static_cast<int>(pool.size());
}

void parallel_rows(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
  if (threads <= 0) threads = default_threads();
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(n, 1)));
  if (threads <= 1) {
    for (int64_t r = 0; r < n; ++r) fn(r);
    return;
  }
  // Rows are claimed from a shared counter, so a pool the OS made smaller still computes every row.
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  run_on_threads(
      threads,
      [&](int) {
        for (int64_t r; !failed && (r = next.fetch_add(1)) < n;) {
          try {
            fn(r);
          } catch (...) {
            failed = true;
            throw;
          }
        }
      },
      Shortfall::fewer);
}

}  // namespace plumbing
}  // namespace attncheck
