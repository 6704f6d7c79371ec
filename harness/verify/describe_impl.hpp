// What `attncheck list` says of an implementation: its availability, capabilities, declarations and backward, as
// text (docs/plugins.md's capability fields).
#pragma once

#include <string>

#include "attncheck/impl.hpp"

namespace attncheck::verify {

// The implementation's block of `attncheck list`: a line with its name and availability (the description, or why
// it is unavailable), then indented lines of what it supports and what it does not (so a gap is never silent), what
// it declares, and in which dtypes it has a backward pass.
std::string describe_implementation(const Impl& impl);

}  // namespace attncheck::verify
