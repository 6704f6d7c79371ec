// Guard bands around the CUDA emulator's global memory: a kernel launched with an output stride that runs past the
// buffer is caught as out-of-bounds naming the buffer and the offset; a correct launch is unaffected.
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
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}};
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
    EXPECT_NE(m.find("emulated kernel wrote outside 'out'"), std::string::npos) << m;
    EXPECT_NE(m.find("past its end"), std::string::npos) << m;
  }
}
