// User modifications written as expressions (Problem::score_expr, mask_expr with expr_tensors / expr_values),
// compiled and evaluated in fp64 by muparser (mods_expr.cpp). Their library entries are in mods_library.cpp;
// syntax and rules: docs/problem-model.md "Expressions".
#pragma once

#include "attncheck/mods.hpp"

namespace attncheck::inline model::expr {

enum class Which : uint8_t { score, mask };

// Throws std::invalid_argument naming the field, the expression and the position: a malformed expression, an
// unknown name, a malformed tensor declaration, values that do not match it; for problems of at most
// kSweepLimit scores also an index out of a tensor's range anywhere, and (mask) a non-finite result.
void check(const Problem& p, Which w);
inline constexpr int64_t kSweepLimit = int64_t{1} << 16;

// The expression at `a` (score: the modified score; mask: nonzero = visible). An index out of range or (mask) a
// non-finite result throws std::invalid_argument naming the expression and the point.
double score(const Problem& p, const ModAt& a, double s);
bool visible(const Problem& p, const ModAt& a);
// d score_expr / d score at `a` for the backward: muparser has no symbolic derivative, so a fourth-order central
// difference at step h = 2^-12 max(1, |s|) (error ~h^4 |f'''''| + 1e-12 |f|). An expression that is not
// differentiable there (a kink or a jump within 2h: the second-order one-sided differences from the left and from
// the right disagree by more than 1e-6, relative) throws std::invalid_argument naming the expression and the point:
// its gradient is not defined, so never guessed.
double dscore(const Problem& p, const ModAt& a, double s);

}  // namespace attncheck::inline model::expr
