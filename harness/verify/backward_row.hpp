// The backward pass in verify and compare (docs/backward.md): `--pass forward|backward|both`, and one result row
// per (gradient fixture, implementation) judged by the gradient tolerance.
#pragma once

#include <string>

#include "attncheck/fixture.hpp"
#include "attncheck/impl.hpp"
#include "invariance_rows.hpp"
#include "case_result.hpp"

namespace attncheck::verify {

enum class Pass { forward, backward, both };
Pass pass_from_string(const std::string& s);  // throws std::invalid_argument naming --pass and the value
inline bool has_forward(Pass p) { return p != Pass::backward; }
inline bool has_backward(Pass p) { return p != Pass::forward; }

// The row's implementation column for the backward pass: "<impl>/backward".
std::string backward_label(const std::string& impl);

// Runs impl's forward and backward on a fixture with gradients and judges dq, dk, dv (dbias). An implementation
// without a backward (or not for this problem) gives "unsupported", an unavailable one "unavailable". With
// reruns >= 2 a judged case also gets its rerun check's row in `checks` (verify --invariance rerun), and with
// `variants` asking them its schedule and layout rows (--invariance schedule,layout).
CaseResult backward_row(const Impl& impl, const Support& available, const Fixture& f, const std::string& file,
                        double tol_scale, int reruns = 0, std::vector<InvarianceRow>* checks = nullptr,
                        const invariance::Options* variants = nullptr);

}  // namespace attncheck::verify
