// The generic part of the modification library (mods.hpp): lookup, validation and the per-key evaluation the
// reference and the CPU implementations share. The entries themselves are in mods_library.cpp.
#include "attncheck/mods.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "attncheck/features.hpp"
#include "detail.hpp"

namespace attncheck {
inline namespace model {

const ModEntry* find_modification(const std::string& name) {
  for (const ModEntry& m : modifications())
    if (name == m.name) return &m;
  return nullptr;
}

namespace {
double Problem::*logit_member(const ModEntry& m) {
  if (m.kind != ModKind::logit || m.fields.size() != 1 || !std::holds_alternative<double Problem::*>(m.fields[0].ref))
    throw std::logic_error(std::string(m.name) + ": not a logit entry with one parameter");
  return std::get<double Problem::*>(m.fields[0].ref);
}
}  // namespace

double logit_parameter(const Problem& p, const ModEntry& m) { return p.*logit_member(m); }
void set_logit_parameter(Problem& p, const ModEntry& m, double value) { p.*logit_member(m) = value; }

std::set<std::string> logit_modification_names() {
  std::set<std::string> names;
  for (const ModEntry& m : logit_modifications()) names.insert(m.name);
  return names;
}

const ModEntry* find_logit_modification(const std::string& name) {
  for (const ModEntry& m : logit_modifications())
    if (name == m.name) return &m;
  return nullptr;
}

bool uses_logit_modifications(const Problem& p) {
  for (const ModEntry& m : logit_modifications())
    if (m.used(p)) return true;
  return false;
}

void clear_modification(Problem& p, const ModEntry& m) {
  const Problem defaults;
  for (const Field& f : m.fields) set_field_text(p, f, field_text(defaults, f));
}

bool uses_modifications(const Problem& p) {
  for (const ModEntry& m : modifications())
    if (m.used(p)) return true;
  return false;
}

std::vector<const ModEntry*> used_modifications(const Problem& p) {
  std::vector<const ModEntry*> out;
  for (const ModEntry& m : modifications())
    if (m.used(p)) out.push_back(&m);
  return out;
}

void validate_modifications(const Problem& p) {
  const std::vector<const ModEntry*> used = used_modifications(p);
  if (used.empty()) return;
  // Packed sequences would need every per-token parameter cut per sequence (sequence_problem); modelled only for
  // the position stage (RoPE positions restart in each sequence, rope_offsets has one entry per sequence).
  if (!p.cu_seqlens_q.empty())
    for (const ModEntry* m : used)
      if (m->kind != ModKind::position)
        detail::fail(std::string(m->fields.front().key) +
                     ": modifications with packed sequences (cu_seqlens_q) are not modelled");
  for (const ModEntry* m : used) m->check(p);
}

ModSet::ModSet(const Problem& p) : p_(p) {
  for (const ModEntry& m : logit_modifications())
    if (m.used(p)) logit_.push_back(&m);
  for (const ModEntry* m : used_modifications(p)) {
    if (m->kind == ModKind::position)
      position_ = true;
    else
      (m->kind == ModKind::score ? score_ : mask_).push_back(m);
  }
}

double ModSet::score(const ModAt& at, double s) const {
  for (const ModEntry* m : score_) s = m->score(p_, at, s);
  return s;
}

double ModSet::logit(const ModAt& at, double s) const {
  for (const ModEntry* m : logit_) s = m->score(p_, at, s);
  return s;
}

float ModSet::logit_f32(const ModAt& at, float s) const {
  for (const ModEntry* m : logit_)
    s = m->score_f32 ? m->score_f32(p_, at, s) : static_cast<float>(m->score(p_, at, static_cast<double>(s)));
  return s;
}

double ModSet::logit_derivative(const ModAt& at, double s) const {
  double d = 1.0;
  for (const ModEntry* m : logit_) {
    d *= m->dscore(p_, at, s);
    s = m->score(p_, at, s);
  }
  return d;
}

double ModSet::logit_rounding() const {
  double u = 0;
  for (const ModEntry* m : logit_) u += m->rounding;
  return u;
}

double ModSet::logit_abs_error() const {
  double e = 0;
  for (const ModEntry* m : logit_) e += m->abs_error(p_);
  return e;
}

double ModSet::logit_dscore_error(double delta) const {
  double e = 0;
  for (const ModEntry* m : logit_) e += m->dscore_error(p_, delta);
  return e;
}

double ModSet::logit_dscore_abs() const {
  double e = 0;
  for (const ModEntry* m : logit_) e += m->dscore_abs;
  return e;
}

double ModSet::derivative(const ModAt& at, double s) const {
  double d = 1.0;
  for (const ModEntry* m : score_) {
    d *= m->dscore(p_, at, s);
    s = m->score(p_, at, s);
  }
  return d;
}

double ModSet::curvature(const ModAt& at, double s) const {
  const double step = std::ldexp(std::max(1.0, std::abs(s)), -10);
  return std::abs(derivative(at, s + step) - derivative(at, s - step)) / (2 * step);
}

double ModSet::slope(const ModAt& at, double s) const {
  double d = 1.0;
  for (const ModEntry* m : score_) {
    double k = m->slope_bound;
    if (k <= 0) {  // measured: a central difference at a step far above the score's rounding
      const double step = std::ldexp(std::max(1.0, std::abs(s)), -20);
      k = std::abs(m->score(p_, at, s + step) - m->score(p_, at, s - step)) / (2 * step);
      if (!std::isfinite(k)) k = 1.0;
    }
    d *= std::max(1.0, k);
    s = m->score(p_, at, s);
  }
  return d;
}

void ModSet::expect_finite(const ModAt& at, double s) const {
  for (const ModEntry* m : score_) {
    const double r = m->score(p_, at, s);
    if (std::isfinite(s) && !std::isfinite(r)) {
      std::ostringstream o;
      o.precision(17);
      o << "score modification " << m->name << " gives the non-finite score " << r << " for score " << s
        << " on a visible key at b=" << at.b << ", h=" << at.h << ", q_idx=" << at.i << ", kv_idx=" << at.j
        << ", q_pos=" << at.pos;
      if (!p_.score_expr.empty() && std::string(m->name) == "score_expr")
        o << " (score_expr '" << p_.score_expr << "')";
      detail::fail(o.str());
    }
    s = r;
  }
}

bool ModSet::visible(const ModAt& at) const {
  for (const ModEntry* m : mask_)
    if (!m->visible(p_, at)) return false;
  return true;
}

}  // namespace model
}  // namespace attncheck
