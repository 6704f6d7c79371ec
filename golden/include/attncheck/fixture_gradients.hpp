// Gradients in fixtures and candidates (golden/SCHEMA.md "Gradients", docs/backward.md): the upstream gradient dO
// a fixture generated with "gradients" holds, the reference gradients added to it, and a candidate's gradients for
// `attncheck compare`.
#pragma once

#include <optional>
#include <string>

#include "attncheck/backward.hpp"
#include "attncheck/fixture.hpp"

namespace attncheck {

// dO of a fixture: N(0,1) (the portable Irwin-Hall normal of rng.hpp) from stream 16 of the case seed, in logical
// [B,Hq,Lq,Dv] order, rounded to the problem dtype, in the problem's layout.
Tensor generate_dout(const Problem& p, uint64_t seed);

// Sets f.dout = generate_dout(p, seed) and f.grad = expected_gradients(problem, inputs, dout).
void add_gradients(Fixture& f, uint64_t seed);

// A candidate's gradients: /actual/dq, /actual/dk, /actual/dv (and /actual/dq's dbias with a bias: /actual/dbias),
// each in any floating dtype, dq/dk/dv in the problem's layout order. nullopt when the file has no /actual/dq.
std::optional<Gradients> read_candidate_gradients(const std::string& path, const Problem& p,
                                                  const FixtureReadOptions& options = {});
// Writes /actual/out (and lse) like write_candidate plus the gradients (tests and tools).
void write_candidate_gradients(const std::string& path, const Problem& p, const Outputs& out, const Gradients& g);

}  // namespace attncheck
