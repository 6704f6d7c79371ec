// The `cuda-emulated` backend: the CUDA kernel headers compiled by g++ and run on the host SIMT emulation, in the
// thread order the schedule asks (docs/cuda.md "Races").
#include "emulated.hpp"

#include <cstring>
#include <memory>

#include "attncheck/declarations.hpp"
#include "attncheck/run_failure.hpp"
#include "attncheck/schedule.hpp"
#include "host_plan_backward.hpp"

namespace attncheck::cuda {

void launch_guarded(HostPlan& plan, KernelVersion v, emu::Order order, const size_t (&written)[4]) {
  constexpr int kBuffers = 5;
  void** ptrs[kBuffers] = {&plan.params.out, &plan.params.lse, &plan.params.weights, &plan.params.scratch,
                           &plan.params.max_logit};
  const char* names[kBuffers] = {"out", "lse", "weights", "scratch", "max_logit"};
  const size_t sizes[kBuffers] = {written[0], written[1], written[2], written[3], plan.max_logit_bytes};
  std::vector<unsigned char> framed[kBuffers];
  void* original[kBuffers];
  for (int b = 0; b < kBuffers; ++b) {
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
                 {"diag_offset", a.diag_offset, plan.diag_offset.size() * sizeof(int64_t)},
                 {"key_length", a.key_length, plan.key_length.size() * sizeof(int64_t)}};
  if (a.v != a.k) cfg.globals.push_back({"v", a.v, plan.v_bytes});  // absorbed MLA: v is a view of k
  if (a.mask) cfg.globals.push_back({"mask", a.mask, plan.mask_bytes});
  if (a.bias) cfg.globals.push_back({"bias", a.bias, plan.bias_bytes()});
  if (a.keep) cfg.globals.push_back({"keep", a.keep, plan.keep_bytes});
  auto add_mod = [&](const char* name, const auto& values) {
    if (!values.empty()) cfg.globals.push_back({name, values.data(), values.size() * sizeof(values[0])});
  };
  add_mod("alibi_slopes", plan.alibi_slopes);
  add_mod("t5_table", plan.t5_table);
  add_mod("key_bias", plan.key_bias);
  add_mod("doc_ids", plan.doc_ids);
  add_mod("prefix_lengths", plan.prefix_lengths);
  add_mod("topk_indices", plan.topk_indices);
  add_mod("sinks", plan.sinks);
  add_mod("q_norm_weight", plan.q_norm_weight);
  add_mod("k_norm_weight", plan.k_norm_weight);
  add_mod("rope_inv_freq", plan.rope_inv_freq);
  add_mod("rope_q_pos", plan.rope_q_pos);
  add_mod("rope_k_pos", plan.rope_k_pos);
  add_mod("rope_pair_section", plan.rope_pair_section);
  add_mod("kv_code_values", plan.kv_code_values);
  add_mod("k_scale", plan.k_scale);
  add_mod("v_scale", plan.v_scale);
  for (int b = 0; b < kBuffers; ++b)
    if (original[b]) cfg.globals.push_back({names[b], *ptrs[b], sizes[b]});
  try {
    emu::launch(cfg, k.fn, plan.params);
  } catch (const emu::OutOfBounds& e) {
    for (int b = 0; b < kBuffers; ++b)
      if (original[b]) *ptrs[b] = original[b];
    throw RunFailure("out-of-bounds", std::string("emulated ") + k.name + " kernel: " + e.what());
  }
  for (int b = 0; b < kBuffers; ++b) {
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
  finish_max_logit(p, plan, out);
}

namespace {
// The thread order a schedule asks (block_order=reversed), else forward.
emu::Order scheduled_order() { return current_schedule().reversed ? emu::Order::reversed : emu::Order::forward; }
}  // namespace

namespace {
class EmulatedImpl final : public KernelImpl {
 public:
  std::string name() const override { return "cuda-emulated"; }
  std::string description() const override {
    return "CUDA kernels (straightforward + fused flash) on the host SIMT emulation";
  }
  Capabilities capabilities() const override {
    Capabilities c = kernel_capabilities();
    c.notes += "; emulated on the host: fibers per CUDA thread, the reversed thread order as block_order";
    return c;
  }
  Support supports(const Problem& p) const override { return kernel_supports(p); }
  // The thread order is a schedule knob (block_order, bitwise): the schedule check (verify --invariance schedule,
  // forward and backward) runs the reversed order and compares it bit for bit with the forward run, so a race
  // (a result that depends on the order threads and blocks run in) fails as schedule-variant.
  Declarations declarations() const override {
    Declarations d = KernelImpl::declarations();
    d.schedule_knobs = d.schedule_bitwise = knob_block_order;
    return d;
  }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    run_emulated(p, in, out, default_version(p), scheduled_order());
  }
  Support supports_backward(const Problem& p) const override { return backward_supports(p); }
  void run_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout,
                    Gradients& g) const override {
    run_backward_emulated(p, in, fwd, dout, g, scheduled_order());
  }
  Support supports_merge(const MergeProblem& p) const override { return merge_kernel_supports(p); }
  void run_merge(const MergeProblem& p, const StoredStates& in, StoredStates& out) const override {
    run_merge_emulated(p, in, out, scheduled_order());
  }
};
}  // namespace

std::vector<ImplPtr> make_emulated_impls() { return {std::make_shared<EmulatedImpl>()}; }

}  // namespace attncheck::cuda
