// The `cuda-emulated` backend: the CUDA kernel headers compiled by g++ and run on the host SIMT emulation,
// every case twice (forward and reversed thread order) so that a race shows up as a disagreement.
#include "emulated.hpp"

#include <cstring>
#include <memory>

#include "attncheck/declarations.hpp"
#include "attncheck/run_failure.hpp"
#include "attncheck/schedule.hpp"
#include "host_plan_backward.hpp"

namespace attncheck::cuda {

void launch_guarded(HostPlan& plan, KernelVersion v, emu::Order order, const size_t (&sizes)[4]) {
  void** ptrs[4] = {&plan.params.out, &plan.params.lse, &plan.params.weights, &plan.params.scratch};
  const char* names[4] = {"out", "lse", "weights", "scratch"};
  std::vector<unsigned char> framed[4];
  void* original[4];
  for (int b = 0; b < 4; ++b) {
    original[b] = *ptrs[b];
    if (!original[b]) continue;
    framed[b].assign(sizes[b] + 2 * kGuardBytes, 0xFF);
    std::memcpy(framed[b].data() + kGuardBytes, original[b], sizes[b]);
    *ptrs[b] = framed[b].data() + kGuardBytes;
  }
  const KernelLaunch k = plan_launch(plan.params, plan.elem, v);
  emu::LaunchConfig cfg;
  cfg.grid = k.grid;
  cfg.block = k.block;
  cfg.dynamic_smem = k.smem;
  cfg.order = order;
  // Every buffer the kernels may touch is registered: a load or store outside all of them names the buffer, the
  // element and the thread at the moment it happens; the guard bands below stay as the net for unchecked writes.
  const AttnParams& a = plan.params;
  cfg.globals = {{"q", a.q, plan.q_bytes},
                 {"k", a.k, plan.k_bytes},
                 {"v", a.v, plan.v_bytes},
                 {"diag_offset", a.diag_offset, plan.diag_offset.size() * sizeof(int64_t)},
                 {"key_length", a.key_length, plan.key_length.size() * sizeof(int64_t)}};
  if (a.mask) cfg.globals.push_back({"mask", a.mask, plan.mask_bytes});
  if (a.bias) cfg.globals.push_back({"bias", a.bias, plan.bias_bytes()});
  if (a.keep) cfg.globals.push_back({"keep", a.keep, plan.keep_bytes});
  for (int b = 0; b < 4; ++b)
    if (original[b]) cfg.globals.push_back({names[b], *ptrs[b], sizes[b]});
  try {
    emu::launch(cfg, k.fn, plan.params);
  } catch (const emu::OutOfBounds& e) {
    for (int b = 0; b < 4; ++b)
      if (original[b]) *ptrs[b] = original[b];
    throw RunFailure("out-of-bounds", std::string("emulated ") + k.name + " kernel: " + e.what());
  }
  for (int b = 0; b < 4; ++b) {
    if (!original[b]) continue;
    *ptrs[b] = original[b];
    const unsigned char* f = framed[b].data();
    for (size_t n = 0; n < framed[b].size(); ++n) {
      if (n == kGuardBytes) n += sizes[b];
      if (n >= framed[b].size() || f[n] == 0xFF) continue;
      const bool before = n < kGuardBytes;
      throw RunFailure("out-of-bounds",
                       std::string("emulated kernel wrote outside '") + names[b] + "': guard byte " +
                           std::to_string(before ? kGuardBytes - n : n - kGuardBytes - sizes[b]) +
                           (before ? " before its start" : " past its end") + " (byte offset " +
                           std::to_string(static_cast<int64_t>(n) - static_cast<int64_t>(kGuardBytes)) + ")");
    }
    std::memcpy(original[b], f + kGuardBytes, sizes[b]);
  }
}

void run_emulated(const Problem& p, const Inputs& in, Outputs& out, KernelVersion v, emu::Order order) {
  HostPlan plan = make_plan(p, in, out, v);
  const size_t sizes[4] = {out.out.bytes.size(), out.lse ? out.lse->bytes.size() : 0,
                           out.weights ? out.weights->bytes.size() : 0, plan.scratch.size()};
  launch_guarded(plan, v, order, sizes);
}

namespace {
// First element (in storage order) where two runs differ bitwise, or -1.
int64_t first_difference(const Tensor& a, const Tensor& b) {
  const size_t es = dtype_size(a.dtype);
  for (size_t n = 0; n < a.bytes.size(); n += es)
    if (std::memcmp(&a.bytes[n], &b.bytes[n], es) != 0) return static_cast<int64_t>(n / es);
  return -1;
}
}  // namespace

void compare_runs(const char* name, const Tensor& fwd, const Tensor& rev) {
  const int64_t n = first_difference(fwd, rev);
  if (n < 0) return;
  throw emu::EmulationError(std::string("race: forward and reversed thread orders disagree on ") + name +
                            " (storage element " + std::to_string(n) + ": " + std::to_string(fwd.get_offset(n)) +
                            " vs " + std::to_string(rev.get_offset(n)) + ")");
}

void run_emulated_both_orders(const Problem& p, const Inputs& in, Outputs& out, KernelVersion v) {
  Outputs reversed = out;  // the same poison as the harness put in `out`
  run_emulated(p, in, out, v, emu::Order::forward);
  run_emulated(p, in, reversed, v, emu::Order::reversed);
  compare_runs("out", out.out, reversed.out);
  if (out.lse) compare_runs("lse", *out.lse, *reversed.lse);
  if (out.weights) compare_runs("weights", *out.weights, *reversed.weights);
}

namespace {
class EmulatedImpl final : public Impl {
 public:
  std::string name() const override { return "cuda-emulated"; }
  std::string description() const override {
    return "CUDA kernels (straightforward + fused flash) on the host SIMT emulation, two thread orders";
  }
  Capabilities capabilities() const override {
    Capabilities c = kernel_capabilities();
    c.notes += "; emulated on the host: fibers per CUDA thread, each case run in forward and reversed order";
    return c;
  }
  Support supports(const Problem& p) const override { return kernel_supports(p); }
  // The thread order is also a schedule knob (block_order, bitwise): the schedule check (verify --invariance
  // schedule) runs the reversed order alone and compares it with a default run through the generic check.
  Declarations declarations() const override {
    Declarations d = Impl::declarations();
    d.schedule_knobs = d.schedule_bitwise = knob_block_order;
    return d;
  }
  // Both orders compared (a race throws), or under a schedule asking the reversed order that order alone.
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    if (current_schedule().reversed) run_emulated(p, in, out, default_version(p), emu::Order::reversed);
    else run_emulated_both_orders(p, in, out, default_version(p));
  }
  Support supports_backward(const Problem& p) const override { return backward_supports(p); }
  void run_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout,
                    Gradients& g) const override {
    run_backward_both_orders(p, in, fwd, dout, g);
  }
};
}  // namespace

std::vector<ImplPtr> make_emulated_impls() { return {std::make_shared<EmulatedImpl>()}; }

}  // namespace attncheck::cuda
