// The generic part of the modification library (mods.hpp): lookup, validation and the per-key evaluation the
// reference and the CPU implementations share. The entries themselves are in mods_library.cpp.
#include "attncheck/mods.hpp"

#include "detail.hpp"

namespace attncheck {

const ModEntry* find_modification(const std::string& name) {
  for (const ModEntry& m : modifications())
    if (name == m.name) return &m;
  return nullptr;
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
  // Packed sequences would need every per-token parameter cut per sequence (sequence_problem); not modelled.
  if (!p.cu_seqlens_q.empty())
    detail::fail(std::string(used.front()->fields.front().key) +
                 ": modifications with packed sequences (cu_seqlens_q) are not modelled");
  for (const ModEntry* m : used) m->check(p);
}

ModSet::ModSet(const Problem& p) : p_(p) {
  for (const ModEntry* m : used_modifications(p)) {
    if (m->kind == ModKind::position) position_ = true;
    else (m->kind == ModKind::score ? score_ : mask_).push_back(m);
  }
}

double ModSet::score(const ModAt& at, double s) const {
  for (const ModEntry* m : score_) s = m->score(p_, at, s);
  return s;
}

bool ModSet::visible(const ModAt& at) const {
  for (const ModEntry* m : mask_)
    if (!m->visible(p_, at)) return false;
  return true;
}

}  // namespace attncheck
