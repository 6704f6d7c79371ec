// `attncheck inspect`'s text: a human summary of a fixture (problem, shapes, features, value statistics,
// provenance, tolerance) and a candidate's verdict with its worst elements and, when it fails, its diagnosis from
// the outputs alone (no probes: nothing is re-run).
#pragma once

#include <cstdio>
#include <string>

#include "attncheck/fixture.hpp"

namespace attncheck::verify {

// The summary of the fixture read from `path`.
void print_fixture(std::FILE* out, const std::string& path, const Fixture& f);

// Reads the candidate file `actual` (/actual/out [, lse, weights]), judges it against f and prints the verdict,
// each tensor's errors, the `top` worst out elements by error / tolerance and, on a failure, the diagnosis.
// Returns whether it passes.
bool print_candidate(std::FILE* out, const Fixture& f, const std::string& actual, int top);

}  // namespace attncheck::verify
