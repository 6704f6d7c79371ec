// Fiber stacks for the SIMT emulation: pooled (a block creates up to 1024 fibers; mmap per fiber would dominate),
// each with a guard page so that a stack overflow in kernel code faults instead of corrupting another fiber.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/stack_context.hpp>
#include <mutex>
#include <new>
#include <vector>

namespace attncheck::emu::detail {
namespace ctx = boost::context;

inline constexpr size_t kStackSize = 256 * 1024;

class StackPool {
 public:
  ctx::stack_context take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        ctx::stack_context sc = free_.back();
        free_.pop_back();
        return sc;
      }
    }
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    void* base = ::mmap(nullptr, kStackSize + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    ::mprotect(base, page, PROT_NONE);  // stacks grow down: the lowest page is the guard
    ctx::stack_context sc;
    sc.size = kStackSize;
    sc.sp = static_cast<char*>(base) + page + kStackSize;
    return sc;
  }
  void give(const ctx::stack_context& sc) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(sc);
  }

 private:
  std::mutex mutex_;
  std::vector<ctx::stack_context> free_;  // never unmapped: bounded by the peak number of live fibers
};

inline StackPool& stack_pool() {
  static StackPool* pool = new StackPool;  // intentionally leaked: fibers may outlive static destruction order
  return *pool;
}

struct PooledStack {
  ctx::stack_context allocate() { return stack_pool().take(); }
  void deallocate(ctx::stack_context& sc) noexcept { stack_pool().give(sc); }
};

}  // namespace attncheck::emu::detail
