// Unit tests of the host SIMT emulation (impls/cuda/emu): thread identity, block barriers, warp collectives,
// shared memory, and that races, deadlocks and partial barriers are reported as errors instead of hiding.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <set>
#include <tuple>

#include "attncheck/declarations.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/schedule.hpp"
#include "emu/simt.hpp"
#include "invariance.hpp"

using attncheck::emu::EmulationError;
using attncheck::emu::LaunchConfig;
using attncheck::emu::Order;

namespace {

LaunchConfig config(dim3 grid, dim3 block, Order order = Order::forward, size_t smem = 0) {
  LaunchConfig c;
  c.grid = grid;
  c.block = block;
  c.order = order;
  c.dynamic_smem = smem;
  return c;
}

// ---- kernels ----------------------------------------------------------------------------------------------
__global__ void record_identity(int* seen) {
  const int bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  seen[bx * blockDim.x * blockDim.y * blockDim.z + tx] += 1;
}

// Rotate values through static shared memory; correct only with the barrier between write and read.
__global__ void rotate_shared(const int* in, int* out) {
  __shared__ int buf[256];
  const int t = threadIdx.x, n = blockDim.x;
  buf[t] = in[blockIdx.x * n + t];
  __syncthreads();
  out[blockIdx.x * n + t] = buf[(t + 1) % n];
}

// The same kernel with the barrier deliberately missing: a race on shared memory.
__global__ void rotate_shared_racy(const int* in, int* out) {
  __shared__ int buf[256];
  const int t = threadIdx.x, n = blockDim.x;
  buf[t] = in[blockIdx.x * n + t];
  out[blockIdx.x * n + t] = buf[(t + 1) % n];
}

// Tree reduction in dynamic shared memory; `racy` drops the barrier inside the loop.
template <bool racy>
__global__ void block_sum(const float* in, float* out) {
  ATTNCHECK_DYNAMIC_SHARED(unsigned char, smem);
  float* s = reinterpret_cast<float*>(smem);
  const int t = threadIdx.x;
  s[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    if (!racy) __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

__global__ void warp_ops(const int* in, int* out) {
  const int t = threadIdx.x, lane = t % 32;
  int v = in[t];
  int sum = v;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  int down = v;
  for (int o = 16; o > 0; o >>= 1) down += __shfl_down_sync(0xffffffffu, down, o);  // lane 0 holds the sum
  int scan = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, scan, o);
    if (lane >= o) scan += y;
  }
  const int bcast = __shfl_sync(0xffffffffu, v, 5);
  const int seg = __shfl_sync(0xffffffffu, v, 3, 16);  // lane 3 of each 16-lane segment
  const unsigned ballot = __ballot_sync(0xffffffffu, v % 2);
  out[t * 6 + 0] = sum;
  out[t * 6 + 1] = lane == 0 ? down : 0;
  out[t * 6 + 2] = scan;
  out[t * 6 + 3] = bcast;
  out[t * 6 + 4] = seg;
  out[t * 6 + 5] = static_cast<int>(ballot);
}

// Only warp 0 reduces with shuffles, then the whole block meets at __syncthreads: a per-warp barrier must not
// wait for the other warps (a block-wide one would deadlock here).
__global__ void first_warp_reduces(const float* in, float* out) {
  __shared__ float total;
  const int t = threadIdx.x;
  if (t < 32) {
    float v = in[t];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (t == 0) total = v;
  }
  __syncthreads();
  out[t] = total;
}

__global__ void partial_barrier(int* out) {
  if (threadIdx.x >= 32) return;  // these threads never reach the barrier below
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void divergent_barriers(int* out) {
  if (threadIdx.x % 2) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void shuffle_against_block_barrier(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x < 16)
    v = __shfl_xor_sync(0xffffffffu, v, 1);  // waits for lanes 16..31, which wait in __syncthreads
  else
    __syncthreads();
  out[threadIdx.x] = v;
}

__global__ void shuffle_from_outside_mask(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x < 16) v = __shfl_sync(0x0000ffffu, v, 20);  // lane 20 is not in the mask
  out[threadIdx.x] = v;
}

__global__ void read_dynamic_shared(unsigned char* out) {
  ATTNCHECK_DYNAMIC_SHARED(unsigned char, smem);
  const int t = threadIdx.x;
  out[blockIdx.x * 64 + t] = smem[t];  // before anyone wrote it: must read the poison, not the previous block
  __syncthreads();
  smem[t] = static_cast<unsigned char>(t);
}

__global__ void throws_in_one_thread(int* out) {
  if (threadIdx.x == 7) throw std::runtime_error("kernel error in thread 7");
  __syncthreads();
  out[threadIdx.x] = 1;
}

template <class T>
std::vector<unsigned char> bytes_of(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  return {p, p + v.size() * sizeof(T)};
}

}  // namespace

TEST(Emu, EveryThreadOfEveryBlockRunsOnceWithItsIdentity) {
  for (Order order : {Order::forward, Order::reversed}) {
    const dim3 grid(3, 2, 2), block(8, 4, 2);
    std::vector<int> seen(3 * 2 * 2 * 8 * 4 * 2, 0);
    attncheck::emu::launch(config(grid, block, order), record_identity, seen.data());
    for (size_t n = 0; n < seen.size(); ++n) ASSERT_EQ(seen[n], 1) << "thread slot " << n;
  }
}

TEST(Emu, BarrierMakesSharedWritesVisible) {
  const int n = 96, blocks = 3;
  std::vector<int> in(n * blocks), out(n * blocks, -1);
  std::iota(in.begin(), in.end(), 100);
  for (Order order : {Order::forward, Order::reversed}) {
    attncheck::emu::launch(config(dim3(blocks), dim3(n), order), rotate_shared, in.data(), out.data());
    for (int b = 0; b < blocks; ++b)
      for (int t = 0; t < n; ++t) ASSERT_EQ(out[b * n + t], in[b * n + (t + 1) % n]) << "block " << b << " t " << t;
  }
}

TEST(Emu, MissingSyncthreadsIsCaughtByTheTwoOrders) {
  const int n = 64;
  std::vector<int> in(n);
  std::iota(in.begin(), in.end(), 1);
  auto run = [&](auto kernel) {
    return attncheck::emu::run_both_orders(
        [&](Order order) {
          std::vector<int> out(n, -1);
          attncheck::emu::launch(config(dim3(1), dim3(n), order), kernel, in.data(), out.data());
          return bytes_of(out);
        },
        "rotate");
  };
  EXPECT_NO_THROW(run(rotate_shared));
  try {
    run(rotate_shared_racy);
    FAIL() << "the racy kernel passed in both orders";
  } catch (const EmulationError& e) {
    EXPECT_NE(std::string(e.what()).find("race"), std::string::npos) << e.what();
  }
}

TEST(Emu, MissingSyncthreadsInReductionIsCaught) {
  const int n = 128, blocks = 2;
  std::vector<float> in(n * blocks);
  for (int k = 0; k < n * blocks; ++k) in[static_cast<size_t>(k)] = static_cast<float>(k % 7) - 3.0f;
  auto run = [&](auto kernel) {
    return attncheck::emu::run_both_orders(
        [&](Order order) {
          std::vector<float> out(blocks, -1.f);
          attncheck::emu::launch(config(dim3(blocks), dim3(n), order, n * sizeof(float)), kernel, in.data(),
                                 out.data());
          return bytes_of(out);
        },
        "block_sum");
  };
  const std::vector<unsigned char> good = run(block_sum<false>);
  std::vector<float> sums(blocks);
  std::memcpy(sums.data(), good.data(), good.size());
  for (int b = 0; b < blocks; ++b) {
    float want = 0;
    for (int t = 0; t < n; ++t) want += in[static_cast<size_t>(b * n + t)];
    EXPECT_EQ(sums[static_cast<size_t>(b)], want);
  }
  EXPECT_THROW(run(block_sum<true>), EmulationError);
}

TEST(Emu, WarpCollectivesMatchTheirDefinitions) {
  const int n = 64;
  std::vector<int> in(n), out(n * 6, -1);
  for (int t = 0; t < n; ++t) in[static_cast<size_t>(t)] = (t * 37 + 11) % 23 - 9;  // signed values
  for (Order order : {Order::forward, Order::reversed}) {
    attncheck::emu::launch(config(dim3(1), dim3(n), order), warp_ops, in.data(), out.data());
    for (int t = 0; t < n; ++t) {
      const int w = t / 32, lane = t % 32;
      int sum = 0, scan = 0;
      unsigned ballot = 0;
      for (int l = 0; l < 32; ++l) {
        const int x = in[static_cast<size_t>(w * 32 + l)];
        sum += x;
        if (l <= lane) scan += x;
        if (x % 2) ballot |= 1u << l;
      }
      EXPECT_EQ(out[t * 6 + 0], sum) << "xor butterfly, thread " << t;
      EXPECT_EQ(out[t * 6 + 1], lane == 0 ? sum : 0) << "shfl_down, thread " << t;
      EXPECT_EQ(out[t * 6 + 2], scan) << "shfl_up scan, thread " << t;
      EXPECT_EQ(out[t * 6 + 3], in[static_cast<size_t>(w * 32 + 5)]) << "broadcast, thread " << t;
      EXPECT_EQ(out[t * 6 + 4], in[static_cast<size_t>(w * 32 + (lane & ~15) + 3)]) << "width 16, thread " << t;
      EXPECT_EQ(static_cast<unsigned>(out[t * 6 + 5]), ballot) << "ballot, thread " << t;
    }
  }
}

TEST(Emu, OneWarpShufflesWhileTheBlockWaitsAtTheBarrier) {
  std::vector<float> in(128), out(128, -1);
  for (int t = 0; t < 128; ++t) in[static_cast<size_t>(t)] = static_cast<float>(t - 64);
  attncheck::emu::launch(config(dim3(1), dim3(128)), first_warp_reduces, in.data(), out.data());
  float want = 0;
  for (int t = 0; t < 32; ++t) want += in[static_cast<size_t>(t)];
  for (int t = 0; t < 128; ++t) EXPECT_EQ(out[static_cast<size_t>(t)], want);
}

TEST(Emu, BarrierReachedByPartOfTheBlockIsAnError) {
  std::vector<int> out(64, 0);
  try {
    attncheck::emu::launch(config(dim3(1), dim3(64)), partial_barrier, out.data());
    FAIL() << "no error";
  } catch (const EmulationError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("only part of the block (32 of 64"), std::string::npos) << m;
    EXPECT_NE(m.find("test_emu.cpp"), std::string::npos) << "names the barrier's source: " << m;
  }
}

TEST(Emu, DivergentBarriersAreAnError) {
  std::vector<int> out(64, 0);
  try {
    attncheck::emu::launch(config(dim3(1), dim3(64)), divergent_barriers, out.data());
    FAIL() << "no error";
  } catch (const EmulationError& e) {
    EXPECT_NE(std::string(e.what()).find("different __syncthreads"), std::string::npos) << e.what();
  }
}

TEST(Emu, DeadlockIsAnErrorNotAHang) {
  std::vector<int> out(64, 0);
  try {
    attncheck::emu::launch(config(dim3(1), dim3(64)), shuffle_against_block_barrier, out.data());
    FAIL() << "no error";
  } catch (const EmulationError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
    EXPECT_NE(m.find("__shfl_xor_sync"), std::string::npos) << m;
  }
}

TEST(Emu, ShuffleFromALaneOutsideTheMaskIsAnError) {
  std::vector<int> out(32, 0);
  EXPECT_THROW(attncheck::emu::launch(config(dim3(1), dim3(32)), shuffle_from_outside_mask, out.data()),
               EmulationError);
}

TEST(Emu, DynamicSharedMemoryIsPoisonedForEveryBlock) {
  std::vector<unsigned char> out(4 * 64, 0);
  attncheck::emu::LaunchConfig c = config(dim3(4), dim3(64), Order::forward, 64);
  c.os_threads = 1;  // blocks one after another on the same OS thread: the buffer is reused
  attncheck::emu::launch(c, read_dynamic_shared, out.data());
  for (size_t n = 0; n < out.size(); ++n) ASSERT_EQ(out[n], 0xff) << "byte " << n;
}

TEST(Emu, KernelExceptionPropagatesAndOtherThreadsAreUnwound) {
  std::vector<int> out(64, 0);
  EXPECT_THROW(attncheck::emu::launch(config(dim3(2), dim3(64)), throws_in_one_thread, out.data()), std::runtime_error);
  // The emulation is usable afterwards.
  std::vector<int> seen(64, 0);
  attncheck::emu::launch(config(dim3(1), dim3(64)), record_identity, seen.data());
  EXPECT_EQ(std::accumulate(seen.begin(), seen.end(), 0), 64);
}

#if defined(__SANITIZE_ADDRESS__)
#define EMU_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_TEST_ASAN 1
#endif
#endif

// A kernel that copies one element past its stack array (memcpy: UBSan's bounds checks do not see it), after a
// barrier, so the copy runs on a resumed fiber.
__global__ void overflows_its_stack(float* out) {
  float local[16];
  for (int i = 0; i < 16; ++i) local[i] = float(threadIdx.x + i);
  __syncthreads();
  float copy[17];
  const size_t n = 16 + (blockDim.x > 1 ? 1 : 0);  // 17: a size the compiler does not see, so it cannot warn
  std::memcpy(copy, local, n * sizeof(float));
  out[threadIdx.x] = copy[0];
}

// Under AddressSanitizer (tools/sanitize.sh --cuda-emu), kernels on fiber stacks are checked like any other code:
// the overflow is reported, and nothing else (a false report would name the emulator's switches instead).
TEST(Emu, AddressSanitizerReportsAStackOverflowInAKernel) {
#ifdef EMU_TEST_ASAN
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> out(64, 0);
  EXPECT_DEATH(attncheck::emu::launch(config(dim3(2), dim3(64)), overflows_its_stack, out.data()),
               "AddressSanitizer: stack-buffer-overflow.*in overflows_its_stack");
#else
  GTEST_SKIP() << "needs an AddressSanitizer build (tools/sanitize.sh --cuda-emu)";
#endif
}

TEST(Emu, InvalidLaunchConfigurationsAreRejected) {
  std::vector<int> seen(2048, 0);
  EXPECT_THROW(attncheck::emu::launch(config(dim3(1), dim3(1025)), record_identity, seen.data()), EmulationError);
  EXPECT_THROW(attncheck::emu::launch(config(dim3(0), dim3(32)), record_identity, seen.data()), EmulationError);
  LaunchConfig big = config(dim3(1), dim3(32), Order::forward, 64 * 1024);
  EXPECT_THROW(attncheck::emu::launch(big, record_identity, seen.data()), EmulationError);
}

TEST(Emu, IdentityOutsideAKernelIsAnError) { EXPECT_THROW(attncheck::emu::identity(), EmulationError); }

namespace {
// An implementation whose kernel runs on the emulation in the thread order the schedule asks, as cuda-emulated's
// does (its block_order knob, declared bitwise): the rotation through shared memory, with or without its barrier,
// over the first 64 elements of q, written to out.
class RotateImpl : public attncheck::Impl {
 public:
  explicit RotateImpl(bool racy) : racy_(racy) {}
  std::string name() const override { return racy_ ? "racy-rotate" : "rotate"; }
  std::string description() const override { return "a shared-memory rotation on the SIMT emulation"; }
  attncheck::Capabilities capabilities() const override { return attncheck::find_impl("cpu")->capabilities(); }
  attncheck::Declarations declarations() const override {
    attncheck::Declarations d;
    d.schedule_knobs = d.schedule_bitwise = attncheck::knob_block_order;
    return d;
  }
  void run(const attncheck::Problem&, const attncheck::Inputs& in, attncheck::Outputs& out) const override {
    const int n = 64;
    std::vector<int> src(n), dst(n, -1);
    for (int t = 0; t < n; ++t) src[static_cast<size_t>(t)] = static_cast<int>(1000 * in.q.get_offset(t));
    const Order order = attncheck::current_schedule().reversed ? Order::reversed : Order::forward;
    attncheck::emu::launch(config(dim3(1), dim3(n), order), racy_ ? rotate_shared_racy : rotate_shared, src.data(),
                           dst.data());
    out.out.fill(0.0);
    for (int t = 0; t < n; ++t) out.out.set_offset(t, dst[static_cast<size_t>(t)]);
  }

 private:
  bool racy_;
};
}  // namespace

// The emulator's thread order reaches a result only through a race; the generic schedule check (which replaced
// cuda-emulated's own two-order comparison) catches it as schedule-variant, and passes the kernel with its barrier.
TEST(Emu, AnOrderDependentKernelIsCaughtByTheScheduleCheck) {
  attncheck::Problem p;
  p.Lq = p.Lk = 16, p.Dqk = p.Dv = 4;
  attncheck::Inputs in{
      attncheck::make_qkv(p, 0), attncheck::make_qkv(p, 1), attncheck::make_qkv(p, 2), {}, {}, {}, {}, {}};
  for (int64_t n = 0; n < in.q.numel(); ++n) in.q.set_offset(n, 0.001 * static_cast<double>(n + 1));
  attncheck::invariance::Options o;
  o.rerun = o.batch = false, o.schedule = true;
  for (bool racy : {false, true}) {
    const RotateImpl impl(racy);
    attncheck::Outputs first;
    ASSERT_TRUE(attncheck::run_impl(impl, p, in, first).ok);
    const auto c = attncheck::invariance::check_forward(impl, p, in, first, o).front();
    if (!racy) {
      EXPECT_EQ(c.result, attncheck::invariance::Check::invariant) << c.message;
      continue;
    }
    EXPECT_EQ(c.result, attncheck::invariance::Check::violated) << c.message;
    EXPECT_EQ(c.message.rfind("schedule-variant: the case run under block_order=reversed differs", 0), 0u) << c.message;
  }
}
