// Score and mask modifications (FlexAttention's score_mod / mask_mod): a library of named entries, each described
// once in reference/model/src/mods_library.cpp: its parameters (Field rows: key, range, fixture storage, name
// fragment), its cross-field rules, its fp64 evaluation, its capability name, its short-name marker, its generator for
// property cases and the fact the tolerance model needs. The reference, the CPU implementations, validation,
// fixtures, names, `attncheck list` and the capability check all read this table. Order of every stage:
// docs/problem-model.md "Modifications".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attncheck/features.hpp"
#include "attncheck/rng.hpp"

namespace attncheck {
inline namespace model {

// Where a modification is evaluated: batch, query head, query row, the query's position on the key axis
// (pos = i + diagonal_offset(b): the causal/window diagonal, so every alignment applies unchanged), key.
struct ModAt {
  int64_t b, h, i, pos, j;
};

// position: a stage applied to q and k before the scores (rotary position embedding: rope.hpp), not per score.
// logit: a score modification of the scaled logit, before the bias (score entries come after the bias). The logit
// entries predate the library: each keeps its schema-1 places (fixture attribute and name fragment among the base
// fields, a capability flag and a field of plugin ABI 1), so they are listed apart (logit_modifications()), are
// capabilities of their own (Capabilities::logit, one feature-table row each) and are not part of the modification
// extension (modifications(), Capabilities::mods).
enum class ModKind : uint8_t { score, mask, position, logit };

struct ModEntry {
  const char* name;    // capability name: Capabilities::mods (logit: ::logit), `attncheck list`, the worker protocol
  const char* marker;  // Problem::short_name() fragment (golden fixture file names)
  ModKind kind;
  std::span<const Field> fields;  // its parameters; problem_fields() lists them after the base fields
  bool (*used)(const Problem&);
  void (*check)(const Problem&);  // cross-field rules (lengths against the shape); throws naming the field
  // score: the modified score of a visible key, from the score after the logit stage and the bias (fp64); logit:
  // from the scaled logit. mask: whether the query sees the key (anded with every other mask).
  double (*score)(const Problem&, const ModAt&, double s);
  // score: d score(s) / d s at a visible key, the factor the backward multiplies the score's gradient with.
  double (*dscore)(const Problem&, const ModAt&, double s);
  bool (*visible)(const Problem&, const ModAt&);
  // Tolerance fact: a bound of |d score(s) / d s|. The score-error terms of docs/tolerance.md are unchanged by a
  // modification whose bound is 1 (the additive library entries); 0: unknown, measured per key (ModSet::slope).
  double slope_bound;
  // Parameters for the problem's shape (property cases): p's shape and alignment are already drawn.
  void (*draw)(Problem&, Rng&);
  const char* doc;
  // Tolerance facts of a logit entry (0 / nullptr for the others, whose error the score terms carry): `rounding`,
  // the units of roundoff a kernel's evaluation adds to a score's relative error; `abs_error`, an absolute bound of
  // that evaluation's rounding per unit roundoff; `dscore_error`, the relative change of the derivative when the
  // score is off by delta; `dscore_abs`, an absolute bound of the derivative's rounding as a kernel forms it from
  // what it kept of the forward, in units of the score's roundoff (it does not shrink with the derivative).
  double rounding = 0;
  double (*abs_error)(const Problem&) = nullptr;
  double (*dscore_error)(const Problem&, double delta) = nullptr;
  double dscore_abs = 0;
  // A logit entry's parameter (its one field, a double): the values fixed and generated cases take (the property
  // suite's draw picks one; the first is the default of cases that force the entry on).
  std::span<const double> examples = {};
  // A logit entry's evaluation as an fp32 kernel forms it (the float tanh of the mutants' and the power grid's
  // kernels, whose correct variants must pass with a kernel's rounding, not with fp64's).
  float (*score_f32)(const Problem&, const ModAt&, float s) = nullptr;
};
// A logit entry's parameter (ModEntry::examples): its one field, a double. Throw std::logic_error for another entry.
double logit_parameter(const Problem& p, const ModEntry& m);
void set_logit_parameter(Problem& p, const ModEntry& m, double value);

std::span<const ModEntry> modifications();
std::span<const ModEntry> logit_modifications();  // the logit stage (ModKind::logit), in the order it applies
const ModEntry* find_logit_modification(const std::string& name);
bool uses_logit_modifications(const Problem& p);
// Resets the entry's parameters to their defaults: the problem without it.
void clear_modification(Problem& p, const ModEntry& m);
const ModEntry* find_modification(const std::string& name);
bool uses_modifications(const Problem& p);
// The modifications a problem uses, in library order (the order scores are modified).
std::vector<const ModEntry*> used_modifications(const Problem& p);
void validate_modifications(const Problem& p);  // every used entry's cross-field rules; varlen refused

// The used entries of one problem, split by kind, for the per-key loops (reference, CPU implementations).
class ModSet {
 public:
  explicit ModSet(const Problem& p);
  // no per-score work after the bias (a position stage or a logit stage may run)
  bool empty() const { return score_.empty() && mask_.empty(); }
  bool has_mask() const { return !mask_.empty(); }
  bool has_score() const { return !score_.empty(); }
  bool has_position() const { return position_; }  // q and k are rotated (rope.hpp) before the scores
  bool has_logit() const { return !logit_.empty(); }
  double logit(const ModAt& at, double s) const;    // the logit stage of the scaled logit s, before the bias
  float logit_f32(const ModAt& at, float s) const;  // the same as an fp32 kernel evaluates it (ModEntry::score_f32)
  // d logit(at, s) / d s: the chain factor what scale·q·k receives (the bias receives the gradient before it).
  double logit_derivative(const ModAt& at, double s) const;
  // The logit stage's tolerance facts, summed over its entries (ModEntry::rounding, abs_error, dscore_error,
  // dscore_abs).
  double logit_rounding() const;
  double logit_abs_error() const;
  double logit_dscore_error(double delta) const;
  double logit_dscore_abs() const;
  double score(const ModAt& at, double s) const;  // score mods in library order
  // d score(at, s) / d s of the score mods together: the chain rule through them in library order (backward).
  double derivative(const ModAt& at, double s) const;
  // |d derivative(at, s) / d s|, a central difference of the entries' derivatives (exactly 0 for the additive
  // library entries): what an error of the score moves the derivative by (gradient tolerance).
  double curvature(const ModAt& at, double s) const;
  // |d score(at, s) / d s| of the score mods together: the product of their bounds, a central difference for an
  // entry without one (an expression); at least 1 (the reference scales the score's error magnitude by it).
  double slope(const ModAt& at, double s) const;
  // Throws std::invalid_argument naming the first score mod that turns the finite s into a non-finite score at
  // `at` (a visible key: an input error, never a silent NaN).
  void expect_finite(const ModAt& at, double s) const;
  bool visible(const ModAt& at) const;  // every mask mod
 private:
  const Problem& p_;
  std::vector<const ModEntry*> score_, mask_, logit_;
  bool position_ = false;
};

}  // namespace model
}  // namespace attncheck
