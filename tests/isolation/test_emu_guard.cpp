// Bounds-checked global memory in the CUDA emulator: every gload/gstore outside the launch's registered buffers
// is caught when it happens, naming the buffer, the element, the thread and the block; the attention kernels run
// with all their buffers registered (launch_guarded) and a correct launch is unaffected.
#include <gtest/gtest.h>

#include "attncheck/run_failure.hpp"
#include "emulated.hpp"

using namespace attncheck;
using namespace attncheck::cuda;

namespace {
Problem small() {
  Problem p;
  p.B = 1, p.Hq = 2, p.Hkv = 2, p.Lq = 8, p.Lk = 8, p.Dqk = p.Dv = 4;
  return p;
}
Inputs inputs(const Problem& p) {
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  int n = 0;
  for (Tensor* t : {&in.q, &in.k, &in.v})
    for (int64_t e = 0; e < t->numel(); ++e) t->set_offset(e, ((n++ * 37) % 11 - 5) * 0.1);
  return in;
}
}  // namespace

TEST(EmuGuard, ACorrectLaunchPassesAndCopiesBack) {
  const Problem p = small();
  const Inputs in = inputs(p);
  Outputs a = make_outputs(p), b = make_outputs(p);
  run_emulated(p, in, a, KernelVersion::flash, emu::Order::forward);
  HostPlan plan = make_plan(p, in, b, KernelVersion::flash);
  const size_t sizes[4] = {b.out.bytes.size(), 0, 0, plan.scratch.size()};
  launch_guarded(plan, KernelVersion::flash, emu::Order::forward, sizes);
  EXPECT_EQ(a.out.bytes, b.out.bytes);
  EXPECT_EQ(plan.params.out, b.out.bytes.data()) << "the caller's pointer is restored";
}

TEST(EmuGuard, AStoreBeyondTheOutputIsOutOfBounds) {
  const Problem p = small();
  const Inputs in = inputs(p);
  Outputs out = make_outputs(p);
  HostPlan plan = make_plan(p, in, out, KernelVersion::flash);
  plan.params.o_stride[2] *= 2;  // rows land twice as far apart: the second head's upper rows pass the end
  const size_t sizes[4] = {out.out.bytes.size(), 0, 0, plan.scratch.size()};
  try {
    launch_guarded(plan, KernelVersion::flash, emu::Order::forward, sizes);
    FAIL() << "expected out-of-bounds";
  } catch (const RunFailure& e) {
    EXPECT_EQ(e.outcome(), "out-of-bounds");
    const std::string m = e.what();
    EXPECT_NE(m.find("out-of-bounds global store to out[element "), std::string::npos) << m;
    EXPECT_NE(m.find("past the end of its 64]"), std::string::npos) << m;  // B*Hq*Lq*Dv = 1*2*8*4
    EXPECT_NE(m.find(" by thread ("), std::string::npos) << m;
  }
}

TEST(EmuGuard, AnInputStrideThatRunsPastQNamesQ) {
  const Problem p = small();
  const Inputs in = inputs(p);
  Outputs out = make_outputs(p);
  HostPlan plan = make_plan(p, in, out, KernelVersion::naive);
  plan.params.q_stride[1] += 1;  // head 1 starts one element late: its last row's last element is q[64]
  const size_t sizes[4] = {out.out.bytes.size(), 0, 0, plan.scratch.size()};
  try {
    launch_guarded(plan, KernelVersion::naive, emu::Order::forward, sizes);
    FAIL() << "expected out-of-bounds";
  } catch (const RunFailure& e) {
    EXPECT_EQ(e.outcome(), "out-of-bounds");
    const std::string m = e.what();
    EXPECT_NE(m.find("naive kernel: out-of-bounds global load from q[element 64: 1 element past the end of its 64]"),
              std::string::npos)
        << m;
  }
  EXPECT_EQ(plan.params.out, out.out.bytes.data()) << "the caller's pointer is restored after a failure too";
}

namespace {
// Each thread adds its element and the next: the last thread of the last block reads one past the end.
__global__ void off_by_one(const float* in, float* out, int n) {
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t < n) gstore(out, t, gload(in, t) + gload(in, t + 1));
}

emu::LaunchConfig two_blocks(const std::vector<emu::GlobalBuffer>& globals) {
  emu::LaunchConfig cfg;
  cfg.grid = dim3(2);
  cfg.block = dim3(32);
  cfg.globals = globals;
  return cfg;
}
}  // namespace

TEST(EmuGuard, ALoadBeyondAnInputNamesTheBufferElementAndThread) {
  std::vector<float> in(64, 1.0f), out(64, 0.0f);
  const emu::LaunchConfig cfg =
      two_blocks({{"in", in.data(), 64 * sizeof(float)}, {"out", out.data(), 64 * sizeof(float)}});
  try {
    emu::launch(cfg, off_by_one, static_cast<const float*>(in.data()), out.data(), 64);
    FAIL() << "expected OutOfBounds";
  } catch (const emu::OutOfBounds& e) {
    EXPECT_STREQ(e.what(),
                 "out-of-bounds global load from in[element 64: 1 element past the end of its 64] by thread (31,0,0) "
                 "of block (1,0,0)");
  }
  // Without the bug the same launch passes: in-bounds accesses are never reported.
  emu::launch(cfg, off_by_one, static_cast<const float*>(in.data()), out.data(), 63);
  EXPECT_EQ(out[62], 2.0f);
}

TEST(EmuGuard, AnOverrunIntoTheNextBufferIsStillAnOverrunOfTheFirst) {
  // "a" and "b" are adjacent: a[64] is b[0] in memory, but the kernel meant a, so it is an overrun of a.
  std::vector<float> both(128, 1.0f), out(64, 0.0f);
  const emu::LaunchConfig cfg = two_blocks({{"a", both.data(), 64 * sizeof(float)},
                                            {"b", both.data() + 64, 64 * sizeof(float)},
                                            {"out", out.data(), 64 * sizeof(float)}});
  try {
    emu::launch(cfg, off_by_one, static_cast<const float*>(both.data()), out.data(), 64);
    FAIL() << "expected OutOfBounds";
  } catch (const emu::OutOfBounds& e) {
    EXPECT_NE(std::string(e.what()).find("load from a[element 64: 1 element past the end of its 64]"),
              std::string::npos)
        << e.what();
  }
}

TEST(EmuGuard, AStoreBeforeTheStartOfAnUnownedPointerNamesTheNearestBuffer) {
  // `out` sits 4 KiB into unregistered memory, so the nearest registered buffer to out - 3 is out itself.
  std::vector<float> in(64, 1.0f), storage(1024 + 64, 0.0f);
  float* out = storage.data() + 1024;
  const emu::LaunchConfig cfg = two_blocks({{"in", in.data(), 64 * sizeof(float)}, {"out", out, 64 * sizeof(float)}});
  float* before = out - 3;  // a base pointer that is in no buffer: judged by the address it reaches
  try {
    emu::launch(cfg, off_by_one, static_cast<const float*>(in.data()), before, 2);
    FAIL() << "expected OutOfBounds";
  } catch (const emu::OutOfBounds& e) {
    EXPECT_NE(std::string(e.what()).find("store to out[element -3: 3 elements before its start]"), std::string::npos)
        << e.what();
  }
}
