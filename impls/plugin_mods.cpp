// Plugin extension tag 11: the problem's library modifications with their parameters, read generically from each
// entry's Field rows (mods.hpp), so a new library entry reaches plugins without a line here.
#include <type_traits>
#include <variant>

#include "attncheck/mods.hpp"
#include "plugin_abi.hpp"

namespace attncheck {
namespace {

attncheck_mod_kind abi_kind(ModKind k) {
  switch (k) {
    case ModKind::score: return ATTNCHECK_MOD_SCORE;
    case ModKind::mask: return ATTNCHECK_MOD_MASK;
    case ModKind::position: break;
    case ModKind::logit: break;  // never described: the logit stage travels in plugin ABI 1's own fields
  }
  return ATTNCHECK_MOD_POSITION;
}

// One parameter: integers (bools, counts, index lists) as i64, reals as f64, anything else (expressions, enums) as
// the text the problem's name uses for it.
attncheck_mod_param param(const Problem& p, const Field& f, DescribedMods& s) {
  attncheck_mod_param out{f.key, ATTNCHECK_PARAM_TEXT, 1, nullptr, nullptr, nullptr};
  auto ints = [&](std::vector<int64_t> v) {
    out.type = ATTNCHECK_PARAM_I64, out.count = static_cast<int64_t>(v.size());
    out.i64 = s.i64.emplace_back(std::move(v)).data();
  };
  auto reals = [&](std::vector<double> v) {
    out.type = ATTNCHECK_PARAM_F64, out.count = static_cast<int64_t>(v.size());
    out.f64 = s.f64.emplace_back(std::move(v)).data();
  };
  std::visit(
      [&](auto ref) {
        if constexpr (std::is_member_object_pointer_v<decltype(ref)>) {
          using T = std::remove_cvref_t<decltype(p.*ref)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>>)
            return ints(p.*ref);
          else if constexpr (std::is_same_v<T, std::vector<double>>)
            return reals(p.*ref);
          else if constexpr (std::is_same_v<T, std::string>)
            out.text = s.text.emplace_back(p.*ref).c_str();
          else if constexpr (std::is_integral_v<T>)
            return ints({static_cast<int64_t>(p.*ref)});
          else if constexpr (std::is_floating_point_v<T>)
            return reals({p.*ref});
          else
            out.text = s.text.emplace_back(field_text(p, f)).c_str();
        } else {
          out.text = s.text.emplace_back(field_text(p, f)).c_str();
        }
      },
      f.ref);
  return out;
}

}  // namespace

const attncheck_extension* describe_modifications(const Problem& p, DescribedMods& s) {
  s = DescribedMods{};
  const std::vector<const ModEntry*> used = used_modifications(p);
  if (used.empty()) return nullptr;
  size_t n = 0;
  for (const ModEntry* m : used) n += m->fields.size();
  s.params.reserve(n);  // the mods point into it
  for (const ModEntry* m : used) {
    const size_t first = s.params.size();
    for (const Field& f : m->fields) s.params.push_back(param(p, f, s));
    s.mods.push_back({m->name, abi_kind(m->kind), static_cast<int64_t>(m->fields.size()), s.params.data() + first});
  }
  s.ext = {{ATTNCHECK_EXT_MODIFICATIONS, sizeof s.ext, nullptr}, static_cast<int64_t>(s.mods.size()), s.mods.data()};
  return &s.ext.header;
}

}  // namespace attncheck
