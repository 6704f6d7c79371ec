// Properties of the modification library (mods.hpp), each case carrying entries drawn by the entry's own generator:
// score and position modifications agree with the reference; a mask modification also equals the dense boolean mask
// of the keys it leaves visible (the kernel's index arithmetic against its own dense path); RoPE scores depend on
// positions only through i - j, so shifting every position by the same amount changes nothing.
#include <algorithm>
#include <type_traits>
#include <variant>

#include "attncheck/block_mask.hpp"
#include "attncheck/features.hpp"
#include "attncheck/mods.hpp"
#include "prop_util.hpp"

namespace attncheck::prop {

namespace {

// The library entries of one kind, in library order; the seed picks one, so consecutive cases cycle through them.
std::string pick_entry(ModKind kind, uint64_t seed) {
  std::vector<std::string> names;
  for (const ModEntry& m : modifications())
    if (m.kind == kind) names.emplace_back(m.name);
  return names[seed % names.size()];
}

// Modifications are drawn after the inputs, so a row they mask entirely averages every value under the uniform
// policy, poisoned ones included: those cases say nothing about the modification.
void no_uniform_poison(CaseSpec& s) {
  if (s.fully_masked == FullyMasked::uniform) s.poison = false;
}

void prep_score(CaseSpec& s) {
  s.mods = {pick_entry(ModKind::score, s.seed)};
  no_uniform_poison(s);
}
void prep_mask(CaseSpec& s) {
  s.mods = {pick_entry(ModKind::mask, s.seed)};
  no_uniform_poison(s);
}
void prep_position(CaseSpec& s) {
  s.mods = {"rope"};
  if (s.seed % 2) s.mods.insert(s.mods.begin(), "qk_norm");  // library order: the norm, then the rotation
}

// Why a case carries no modification: the implementation does not declare the drawn entries (restrict_to took
// them out), or the entry's draw left it off for this shape (RoPE with Dqk = 1 has nothing to rotate).
Outcome no_modification(const Case& c) {
  if (c.spec.mods.empty()) return Outcome::unsup("modifications not supported");
  return Outcome::unsup("the drawn modification is off for this shape");
}

Outcome agreement_with_mods(const Impl& impl, const Case& c) {
  if (!uses_modifications(c.p)) return no_modification(c);
  return agreement(impl, c);
}

// The case with its mask modifications replaced by a dense [B,Hq,Lq,Lk] boolean mask of the keys the whole
// problem leaves visible (the case's other masks stay: anding them again changes nothing).
Case as_dense_mask(const Case& c) {
  Case d = c;
  const Problem none;
  const DenseMask dense(c.p, c.in);
  Tensor mask(DType::u8, {c.p.B, c.p.Hq, c.p.Lq, c.p.Lk});
  std::vector<char> vis(static_cast<size_t>(c.p.Lk));
  for (int64_t b = 0; b < c.p.B; ++b)
    for (int64_t h = 0; h < c.p.Hq; ++h)
      for (int64_t i = 0; i < c.p.Lq; ++i) {
        dense.row(b, h, i, vis.data());
        for (int64_t j = 0; j < c.p.Lk; ++j) mask.put(b, h, i, j, vis[static_cast<size_t>(j)]);
      }
  auto reset = [&](const Field& f) {
    std::visit(
        [&](auto member) {
          if constexpr (!std::is_same_v<decltype(member), DerivedF64>) d.p.*member = none.*member;
        },
        f.ref);
  };
  for (const ModEntry* m : used_modifications(c.p))
    if (m->kind == ModKind::mask)
      for (const Field& f : m->fields) reset(f);
  // A field shared with another entry that is now invalid alone (the expressions' tensors) goes with them.
  for (const ModEntry& m : modifications())
    for (const Field& f : m.fields)
      if (f.valid && !f.valid(d.p)) reset(f);
  d.p.mask_shape = std::array<int64_t, 4>{c.p.B, c.p.Hq, c.p.Lq, c.p.Lk};
  d.in.mask = std::move(mask);
  return d;
}

Outcome mask_mod(const Impl& impl, const Case& c) {
  if (!uses_modifications(c.p)) return no_modification(c);
  const Outcome agreed = agreement(impl, c);
  if (agreed.kind != Outcome::pass) return agreed;
  if (!impl.capabilities().bool_mask) return Outcome::unsup("boolean mask not supported");
  const Case d = as_dense_mask(c);
  RUN_OR_UNSUP(ra, impl, c);
  RUN_OR_UNSUP(rb, impl, d);
  Outcome o = compare_pair(impl, c, *ra, *rb);
  o.ratio = std::max(o.ratio, agreed.ratio);  // both checks' comparisons count
  o.profiles.insert(o.profiles.begin(), agreed.profiles.begin(), agreed.profiles.end());
  return o;
}

// Every RoPE position moved by the same amount: the rotation of q_i and k_j at positions p_i + t and p_j + t has
// the dot product of the unshifted pair, so only the angle rounding may change.
Outcome rope_shift(const Impl& impl, const Case& c) {
  if (c.p.rotary_dim == 0) return Outcome::unsup("RoPE not supported");
  // In fp64 the reference's own angles (fp64 position * inv_freq) round as much as the kernel's, so the two exact
  // results differ by about the tolerance: the relation holds only for the narrower dtypes.
  if (c.p.dtype == DType::f64) return Outcome::unsup("rope_shift: fp64 (the reference's angle rounding)");
  Case d = c;
  for (int64_t& o : d.p.rope_offsets) o += 4099;
  RUN_OR_UNSUP(ra, impl, d);
  RUN_OR_UNSUP(rb, impl, c);
  return compare_pair(impl, d, *ra, *rb);  // the shifted case's tolerance: its angles are the larger ones
}

}  // namespace

std::vector<Property> mods_properties() {
  return {
      {"score_mod", "a score modification (ALiBi, T5 buckets, an expression) agrees with the reference", prep_score,
       agreement_with_mods},
      {"mask_mod",
       "a mask modification agrees with the reference and equals the dense boolean mask of the keys it leaves "
       "visible",
       prep_mask, mask_mod},
      {"position_mod", "RoPE (with QK-norm before it on odd seeds) agrees with the reference", prep_position,
       agreement_with_mods},
      {"rope_shift", "every RoPE position shifted by the same amount leaves the result unchanged", prep_position,
       rope_shift},
  };
}

}  // namespace attncheck::prop
