// Host SIMT emulation: lets g++ compile and run CUDA kernel bodies unchanged. Each CUDA thread is a fiber
// (boost::context); one block runs at a time per OS thread, so __shared__ is thread_local; __syncthreads and the
// warp collectives are barriers resolved by a scheduler that reports deadlocks and partial barriers as errors.
#pragma once

#if defined(__CUDACC__)
#error "emu/simt.hpp is the g++ stand-in for the CUDA device environment; nvcc must not include it"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>  // under g++: dim3/uint3 and the __global__/__device__ qualifiers defined as empty

#include <cstdint>
#include <cstring>
#include <functional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace attncheck::emu {

// An error of the emulated program (deadlock, partial barrier, bad collective, bad launch); never a hang.
class EmulationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A global load or store outside every buffer registered for the launch (LaunchConfig::globals). The message
// names the buffer, the element, the thread and the block.
class OutOfBounds : public EmulationError {
 public:
  using EmulationError::EmulationError;
};

// A buffer of global memory the kernel may read or write: `bytes` from `base`, named in errors.
struct GlobalBuffer {
  std::string name;
  const void* base = nullptr;
  size_t bytes = 0;
};

// The order in which the scheduler resumes the threads of a block (and dispatches blocks) at every step.
// Running a kernel in both orders and comparing the results exposes races on shared and global memory.
enum class Order { forward, reversed };

struct LaunchConfig {
  dim3 grid{1, 1, 1};
  dim3 block{1, 1, 1};
  size_t dynamic_smem = 0;        // bytes of the block's dynamic shared memory (poisoned with 0xff bytes)
  size_t smem_limit = 48 * 1024;  // the device's default limit without cudaFuncAttributeMaxDynamicSharedMemorySize
  Order order = Order::forward;
  int os_threads = 0;                 // blocks run in parallel on this many OS threads (0: attncheck default)
  std::vector<GlobalBuffer> globals;  // empty: global accesses are not checked; else every one must fall inside
};

// The identity of the running emulated thread (what threadIdx & co. read).
struct ThreadIdentity {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// Run `body` once per thread of every block; throws EmulationError (or the kernel's own exception) on failure.
void launch_body(const LaunchConfig& cfg, const std::function<void()>& body);

// Runs `run(order)` forward, then reversed; each call returns the bytes the kernel wrote. Throws EmulationError
// naming `what` and the first differing byte when the two differ: the result depends on thread order (a race).
// Returns the forward bytes.
std::vector<unsigned char> run_both_orders(const std::function<std::vector<unsigned char>(Order)>& run,
                                           const std::string& what);

template <class... Params, class... Args>
void launch(const LaunchConfig& cfg, void (*kernel)(Params...), Args&&... args) {
  launch_body(cfg, [&] { kernel(args...); });
}

// ---- what the device intrinsics call ---------------------------------------------------------------------
const ThreadIdentity& identity();  // throws EmulationError outside an emulated kernel
unsigned char* dynamic_shared();
void block_barrier(const std::source_location& where);

// The bounds check of one global access: element `index` of `elem_bytes` bytes from `base` (a pointer into the
// buffer the kernel means; it may point past its start). The buffer holding `base` must hold the whole element;
// a `base` in no buffer is judged by the address (the buffer holding it wins, else the nearest within 4 KiB is
// named as overrun). Throws OutOfBounds; no check when the launch registered no globals.
void check_global(const void* base, int64_t index, size_t elem_bytes, bool store);

enum class WarpOp : uint8_t { sync, shfl_idx, shfl_up, shfl_down, shfl_xor, ballot };
// Every lane in `mask` must reach the same collective; each lane gets the 64-bit value the operation selects.
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width,
                         const std::source_location& where);

template <class T>
uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace attncheck::emu

// ---- the CUDA device environment under g++ ----------------------------------------------------------------
#define threadIdx (::attncheck::emu::identity().thread_idx)
#define blockIdx (::attncheck::emu::identity().block_idx)
#define blockDim (::attncheck::emu::identity().block_dim)
#define gridDim (::attncheck::emu::identity().grid_dim)
#ifndef warpSize
#define warpSize 32
#endif

// cuda_runtime.h defines __shared__ as nothing for host compilers. A block's threads share one OS thread, and
// blocks on one OS thread run one after another, so per-OS-thread static storage is exactly block-shared memory.
// Static __shared__ storage starts zeroed at every launch (each launch runs on fresh OS threads) but is not reset
// between blocks of one launch; dynamic shared memory is poisoned (0xff bytes) at every block start.
#undef __shared__
#define __shared__ static thread_local

// The block's dynamic shared memory: under nvcc `extern __shared__ T name[]`, here one named per-block buffer.
#define ATTNCHECK_DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(::attncheck::emu::dynamic_shared())

inline void __syncthreads(std::source_location where = std::source_location::current()) {
  ::attncheck::emu::block_barrier(where);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, std::source_location where = std::source_location::current()) {
  ::attncheck::emu::warp_collective(::attncheck::emu::WarpOp::sync, mask, 0, 0, 32, where);
}
template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32,
              std::source_location where = std::source_location::current()) {
  using namespace ::attncheck::emu;
  return from_bits<T>(warp_collective(WarpOp::shfl_idx, mask, to_bits(var), src_lane, width, where));
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                 std::source_location where = std::source_location::current()) {
  using namespace ::attncheck::emu;
  return from_bits<T>(warp_collective(WarpOp::shfl_up, mask, to_bits(var), static_cast<int>(delta), width, where));
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                   std::source_location where = std::source_location::current()) {
  using namespace ::attncheck::emu;
  return from_bits<T>(warp_collective(WarpOp::shfl_down, mask, to_bits(var), static_cast<int>(delta), width, where));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                  std::source_location where = std::source_location::current()) {
  using namespace ::attncheck::emu;
  return from_bits<T>(warp_collective(WarpOp::shfl_xor, mask, to_bits(var), lane_mask, width, where));
}
inline unsigned __ballot_sync(unsigned mask, int predicate,
                              std::source_location where = std::source_location::current()) {
  using namespace ::attncheck::emu;
  return static_cast<unsigned>(warp_collective(WarpOp::ballot, mask, predicate != 0, 0, 32, where));
}
inline int __any_sync(unsigned mask, int predicate, std::source_location where = std::source_location::current()) {
  return __ballot_sync(mask, predicate, where) != 0;
}
inline int __all_sync(unsigned mask, int predicate, std::source_location where = std::source_location::current()) {
  return __ballot_sync(mask, predicate, where) == mask;
}
