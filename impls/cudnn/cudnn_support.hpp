// What the cudnn backend can express of the problem model, decided before cuDNN is asked (docs/cudnn.md has the
// table). Pure C++: no cuDNN call, so it answers the same on machines with and without a GPU.
#pragma once

#include "attncheck/impl.hpp"

namespace attncheck::cudnn {

Capabilities cudnn_capabilities();
// Capability flags plus the per-case limits that flags cannot say (bias dtype, rows with no visible key,
// bottom-right causal with bias or dropout).
Support cudnn_supports(const Problem& p);
// cudnn_supports plus the backward graph's limits (cudnn-frontend's SDPA backward checks, and cuDNN's heuristics,
// which propose no engine otherwise): fp16/bf16 only, head dims up to 128 (above needs sm_90, and the device is
// not known here), not Lq = Lk = 1, and a bias only when its dBias is cuDNN's [1, Hq, Lq, Lk].
Support cudnn_supports_backward(const Problem& p);
// Cases the graph expresses but that were measured wrong on a device (docs/gpu.md): refused by the `cudnn`
// implementation, apart from the mapping above so that the deviceless graph tests still build their graphs.
Support measured_wrong(const Problem& p, bool backward);

}  // namespace attncheck::cudnn
