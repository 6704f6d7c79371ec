// The CUDA kernels run on the host SIMT emulation (the `cuda-emulated` backend), exposed for tests that pick
// the kernel version and the thread order themselves.
#pragma once

#include "emu/simt.hpp"
#include "attncheck/backward.hpp"
#include "attncheck/state.hpp"
#include "host_plan.hpp"

namespace attncheck::cuda {

// Kernel `v` on the emulation, threads and blocks resumed in `order`. `out` comes from make_outputs(p).
void run_emulated(const Problem& p, const Inputs& in, Outputs& out, KernelVersion v, emu::Order order);

// Launches a plan with every buffer the kernels write (out, lse, weights, scratch, max_logit) moved into a copy
// framed by a guard band of kGuardBytes 0xFF bytes on each side; a changed guard byte throws
// RunFailure("out-of-bounds") naming the buffer and the byte offset. `sizes` are the extents of plan.params.out,
// lse, weights and scratch; max_logit's is plan.max_logit_bytes.
constexpr size_t kGuardBytes = 4096;
void launch_guarded(HostPlan& plan, KernelVersion v, emu::Order order, const size_t (&sizes)[4]);

// The backward kernels (emulated_backward.cpp): row statistics, dK/dV, dQ, dBias, every buffer they write framed
// by guard bands. `fwd` is the forward's outputs with lse; `g` comes from make_gradients(p).
void run_backward_emulated(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout, Gradients& g,
                           emu::Order order);

// The combine kernel (kernels/merge_states.cuh, emulated_merge.cpp): N stored states -> the merged state, `out` from
// make_merge_outputs(p). merge_kernel_supports says which merge problems it takes.
Support merge_kernel_supports(const MergeProblem& p);
void run_merge_emulated(const MergeProblem& p, const StoredStates& in, StoredStates& out, emu::Order order);
}  // namespace attncheck::cuda
