// Golden fixtures: one HDF5 file per case holding a problem, its inputs exactly as an implementation receives them,
// the reference's expected outputs in double, provenance and the tolerance model. Format: golden/SCHEMA.md.
// Library code throws std::invalid_argument naming the file and the field; only the CLI picks exit codes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/block_mask.hpp"
#include "attncheck/budget.hpp"
#include "attncheck/grad_scales.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {

// The schema this library writes; it reads this version and every older one (1: variable-length strings, read only from
// files that declare it).
inline constexpr int64_t kFixtureSchemaVersion = 2;  // 2: strings stored at fixed length

// Where a fixture came from. Everything here is deterministic (no timestamps, no host names), so regenerating a
// fixture reproduces its bytes.
struct Provenance {
  int64_t schema_version = kFixtureSchemaVersion;
  std::string attncheck_version;             // version of the tool that wrote the file
  std::string reference_precision = "fp64";  // the reference accumulates in double
  uint64_t seed = 0;                         // generator seed of the value distribution
  std::string distribution = "normal";       // value distribution name (see generate.hpp)
  std::string command;                       // the command that made it, e.g. "attncheck generate --spec suite.json"
};

struct Fixture {
  std::string name;  // case name, e.g. "fp16/B2-Hq4-Hkv2-Lq33-Lk65-D32/causal-br/tied_maxima"
  Problem problem;
  Inputs inputs;
  // The reference's result for `inputs`: out, lse, weights (when problem.want_weights), and the error scales
  // score_mag and out_abs the tolerance model needs, all in double.
  ExpectedAttention expected;
  Provenance provenance;
  ToleranceModel tolerance;
  // Backward (golden/SCHEMA.md "Gradients", attncheck/fixture_gradients.hpp): only in fixtures generated with
  // "gradients". has_gradients is read by read_fixture_header too; dout and grad (the reference gradients with
  // their error scales) by read_fixture.
  bool has_gradients = false;
  // False when a dataset read carried no Fletcher32 checksum (golden/SCHEMA.md "Checksums"): a changed bit in its
  // stored values cannot be told from data. Set by read_fixture; reports note such files.
  bool checksummed = true;
  std::optional<Tensor> dout;
  std::optional<ExpectedGradients> grad;
  // The exact block mask of the case (FlexAttention's BlockMask convention, docs/block-mask.md) at the block sizes its
  // suite case asks for, as derive_block_mask gives it; verify hands it to every forward run. Only in fixtures
  // generated with "block_mask" (golden/SCHEMA.md "Block mask"); read_fixture refuses one that is not the exact
  // block mask of the fixture's problem and inputs.
  std::optional<BlockMask> block_mask;
};

struct FixtureReadOptions {
  // Refuse files whose tensors would need more than this many bytes in memory (inputs + expected, as stored and
  // as widened to double). Checked from the attributes and dataset extents before anything is allocated.
  uint64_t max_bytes = budget().max_bytes;
  // Refuse fixtures whose problem means more reference work than this (reference_flops; 0 = unlimited).
  double max_flops = budget().max_flops;
};

// Bytes a fixture of problem `p` needs in memory when read (inputs as stored, expected in double), computed in
// double so absurd extents cannot overflow. read_fixture refuses more than FixtureReadOptions::max_bytes, and
// read_suite refuses a case beyond it (it could be generated but never verified).
double fixture_memory_bytes(const Problem& p);

// Build a fixture from a problem and inputs: runs the reference (double) and fills `expected`.
Fixture make_fixture(std::string name, const Problem& p, Inputs in, Provenance prov, ToleranceModel tol = {});

// An exact case's claim (tolerance.exact_out; docs/tolerance.md "Exact cases"): no dropout, no sinks, every (sampled)
// row has one visible key, or (fp16/bf16) every visible score tied and a non-zero answer, and every expected out
// value is representable in the dtype. Throws std::invalid_argument "exact_out: row ...: what" otherwise; nothing
// when the fixture is not exact.
void check_exact_out(const Fixture& f);

// Write durably (write_file_durably, durable_file.hpp): an interrupted run or a full disk never leaves a
// half-written fixture. Output is byte-identical for identical fixtures.
void write_fixture(const std::string& path, const Fixture& f);
// The bytes write_fixture writes (`path` names the file in messages): `generate` compares them with a file.
std::string fixture_image(const std::string& path, const Fixture& f);

// Read and validate. Throws std::invalid_argument "<path>: <field>: <what>" for: a file that is not HDF5, a
// schema_version from the future, missing attributes or datasets, wrong dtype, rank or shape, sizes beyond
// options.max_bytes, or a problem that fails validate().
Fixture read_fixture(const std::string& path, const FixtureReadOptions& options = {});

// Read only the attributes (problem, name, provenance, tolerance): cheap, for listing and filtering.
Fixture read_fixture_header(const std::string& path, const FixtureReadOptions& options = {});

// A candidate's outputs for `attncheck compare`: /actual/out (required), /actual/lse, /actual/weights (optional),
// in any floating dtype (fp16, fp32, fp64, or uint16 with encoding=bfloat16). Shapes are checked against `p`:
// out in the problem's layout, lse [B,Hq,Lq], weights [B,Hq,Lq,Lk]. Values are widened to double. An .npz
// (np.savez) holds the same tensors as members out, lse, weights, scores, present_key, present_value (no gradients).
Outputs read_candidate(const std::string& path, const Problem& p, const FixtureReadOptions& options = {});

// Write a candidate file (used by tests and by tools that dump an implementation's outputs).
void write_candidate(const std::string& path, const Problem& p, const Outputs& out);

// Every HDF5 read above (fixtures, headers, candidates, gradients, import's arrays) runs first in a forked child
// process on an in-memory copy of the file, with a time and memory limit, so a file that crashes or hangs the HDF5
// library is std::invalid_argument naming it (docs/hardening.md "Untrusted HDF5 files"). On by default; off only
// where a crash must surface in this process (the fuzz target).
void set_read_isolation(bool on);
// Reads `paths` ahead, in one child process for all of them, so that the read_fixture and read_fixture_header calls
// of the same files (same bytes, same options) that follow in this process start no process each; a file that
// crashed or hung the child is refused by them with that message. For callers about to read many fixtures.
void prepare_fixture_reads(const std::vector<std::string>& paths, const FixtureReadOptions& options = {});
// The time limit of one such read in seconds; 0 (default): 5 s plus 1 s per 100 MB of the file.
void set_read_time_limit(double seconds);

// File name of a case: the name with '/' replaced by '_' plus ".h5", e.g. "fp16_B2-..._causal-br_tied_maxima.h5".
std::string fixture_file_name(const std::string& case_name);

// The attncheck version compiled into the library (the project version).
const char* attncheck_version();

}  // namespace attncheck
