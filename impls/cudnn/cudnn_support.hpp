// What the cudnn backend can express of the problem model, decided before cuDNN is asked (docs/cudnn.md has the
// table). Pure C++: no cuDNN call, so it answers the same on machines with and without a GPU.
#pragma once

#include "attncheck/impl.hpp"

namespace attncheck::cudnn {

Capabilities cudnn_capabilities();
// Capability flags plus the per-case limits that flags cannot say (bias dtype, rows with no visible key,
// bottom-right causal with bias or dropout).
Support cudnn_supports(const Problem& p);

}  // namespace attncheck::cudnn
