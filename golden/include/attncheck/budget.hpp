// The work budget: what a fixture's, candidate's or spec's declared shapes imply in memory and in
// reference work is checked before anything is allocated or computed, so a 65 KB file cannot start hours of work
// or an allocation beyond memory. The readers check the process budget; `attncheck` sets it from --max-memory and
// --max-work (defaults from machine_budget()).
#pragma once

#include <cstdint>
#include <string>

#include "attncheck/problem.hpp"

namespace attncheck {

struct Budget {
  uint64_t max_bytes = uint64_t{2} << 30;  // memory for one case's tensors
  double max_flops = 0;                    // reference work of one case; 0 = unlimited
};

// The library's default until set_budget: 2 GiB, unlimited work.
const Budget& budget();
void set_budget(const Budget& b);

// Sized for this machine: half the physical memory (2 GiB if unknown) and default_threads() x 2.5e11 FLOPs
// (about 1000 s of the looped reference, which runs at ~0.25 GFLOP/s per thread).
Budget machine_budget();

// Forward reference FLOPs of a problem: 2·B·Hq·Lq·Lk·(Dqk+Dv) (q·k and P·V), x3.5 with gradients (the backward is
// ~2.5x the forward). In double: absurd extents cannot overflow.
double reference_flops(const Problem& p, bool gradients);

// The tail of a "size: ..." message: "more than the memory budget of N bytes (raise it with --max-memory)".
std::string over_memory_budget(uint64_t cap);

// Throws std::invalid_argument "work: <problem> means X FLOPs of reference work, more than the work budget of Y
// FLOPs (raise it with --max-work)" when max_flops > 0 and the problem needs more.
void check_work(const Problem& p, bool gradients, double max_flops);

// Parses a --max-memory value: bytes, or with a binary suffix K, M, G, T ("512M", "16G"); throws naming `flag`.
uint64_t parse_bytes(const std::string& flag, const std::string& text);
// Parses a --max-work value: FLOPs as a number ("1e13") or with a decimal suffix G, T, P ("50T").
double parse_flops(const std::string& flag, const std::string& text);

}  // namespace attncheck
