// default_threads and run_on_threads (threads.hpp).
#include "attncheck/threads.hpp"

#include <algorithm>
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

int max_threads() { return 4096; }

int default_threads() {
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

}  // namespace attncheck
