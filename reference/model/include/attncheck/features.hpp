// The one description of the problem: every Problem field (type, default, valid range, fixture storage, name
// fragment) and every optional feature (what turns it on, the capability that allows it). Validation, capability
// checks, names, parse_name, fixture attributes, the spec reader and `attncheck list` iterate these tables.
#pragma once

#include <algorithm>
#include <array>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "attncheck/capabilities.hpp"
#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace model {

// A Problem member, typed; or, for a derived attribute, the function that computes it.
using DerivedF64 = double (*)(const Problem&);
using FieldRef =
    std::variant<int64_t Problem::*, double Problem::*, uint64_t Problem::*, bool Problem::*, DType Problem::*,
                 Layout Problem::*, Alignment Problem::*, MaskFill Problem::*, FullyMasked Problem::*,
                 std::optional<double> Problem::*, std::optional<std::array<int64_t, 4>> Problem::*,
                 std::vector<int64_t> Problem::*, std::vector<double> Problem::*, ScoresOut Problem::*,
                 KvScales Problem::*, MaxLogitOut Problem::*, std::string Problem::*, DerivedF64>;

// Where a field is kept in a fixture (golden/SCHEMA.md).
enum class Stored : uint8_t {
  attribute,  // root attribute, always written
  if_set,     // root attribute written only when it differs from the default (absent = default): fields added
              // after schema 1 use this, so fixtures without the feature stay byte-identical
  dataset,    // /inputs/<key>, written when non-empty: int64 lists one entry per batch, double lists (f64) one
              // entry per query head
  derived,    // root attribute computed from other fields; written for readers of the file, never read back
};

// How a field appears in Problem::name().
enum class Named : uint8_t {
  dtype,     // the first component
  shape,     // "B2-Hq4-..." in the second component (Dqk == Dv prints as D)
  fragment,  // "key" (a true bool) or "key=value", one component each, only when not the default
  no,        // not part of the name (derived)
};

struct Field {
  const char* key;  // Problem member name = suite spec key = fixture attribute or dataset = name fragment key
  FieldRef ref;
  Stored stored;
  Named named;
  const char* rule;               // the valid range, as the error message words it ("must be >= 1")
  bool (*valid)(const Problem&);  // nullptr: any value of the type (cross-field rules live in validate())
  const char* doc;
};

// Every field, in fixture attribute order (that order is part of the byte-identical golden files).
std::span<const Field> problem_fields();
const Field* find_field(const std::string& key);

// Generic access through a Field, for the layers that iterate the table.
std::string field_text(const Problem& p, const Field& f);  // shortest text that parses back to the same value
void set_field_text(Problem& p, const Field& f, const std::string& text);  // throws naming the field
bool field_is_default(const Problem& p, const Field& f);
bool field_equal(const Problem& a, const Problem& b, const Field& f);

// Plugin extension tags of the features added after ABI 2 (ATTNCHECK_EXT_* in plugin.h, asserted equal there).
namespace ext_tag {
inline constexpr uint32_t sinks = 2;
inline constexpr uint32_t scores = 3;
inline constexpr uint32_t kv_append = 4;
inline constexpr uint32_t backward = 5;  // not a problem feature: a backward request (plugin.h); reserved here
inline constexpr uint32_t varlen = 6;
inline constexpr uint32_t paged_kv = 7;
inline constexpr uint32_t fp8 = 8;
inline constexpr uint32_t max_logit = 10;  // 9 is the schedule (plugin.h), not a problem feature
// The modification library (mods.hpp): offered per entry, by the entry's name in a plugin's features.
inline constexpr uint32_t modifications = 11;
// 12 is the block mask (plugin.h), handed to a kernel, not a problem feature.
inline constexpr uint32_t mla = 13;
inline constexpr uint32_t kv_quant = 14;
}  // namespace ext_tag

struct ModEntry;

// Every optional feature a backend may not support, in the order capability checks report them. Read a row through
// its member functions: a logit-stage entry's row (one per entry of logit_modifications(), mods.hpp) has no
// function pointers and no flag of its own; its entry says whether a problem uses it, and its capability is its name
// in Capabilities::logit.
struct Feature {
  const char* name;  // as `attncheck list` and reports print it
  // The name in the worker protocol's `capabilities.features` and in a v2 plugin's `features` list (frozen for
  // the features of protocol 1, which predate the table's names); for a feature without a boolean flag, the key
  // of the worker protocol's capabilities object that carries it ("dtypes", "max_head_dim", ...).
  const char* protocol;
  bool (*used)(const Problem&);                           // does the problem use it
  Support (*check)(const Capabilities&, const Problem&);  // is it allowed (used only when `used`)
  bool Capabilities::*flag;  // the boolean capability, or nullptr when `check` is richer or on a logit-stage row
  // The extension tag (ATTNCHECK_EXT_* of plugin.h) that carries it to plugins: 0 = a v1 field of
  // attncheck_problem and a flag of attncheck_capabilities. A feature with a tag is offered only to a plugin that
  // lists `name` in its vtable's `features` (its Capabilities flag defaults to false), so older plugins never see
  // it.
  uint32_t abi_tag;
  // What the backward (reference_backward, the CPU backward) lacks for it, as "backward with <gap> not
  // implemented" words it; nullptr when the backward models the feature.
  const char* backward_gap;
  const ModEntry* logit = nullptr;

  bool uses(const Problem& p) const;                                    // does the problem use it
  Support allows(const Capabilities& c, const Problem& p) const;        // is it allowed (asked only when used)
  bool boolean() const { return flag != nullptr || logit != nullptr; }  // a yes/no capability
  bool declared(const Capabilities& c) const;                           // boolean(): is it declared
  void declare(Capabilities& c, bool on) const;                         // boolean(): declare it, or not
};
std::span<const Feature> problem_features();
// Whether the backward models every feature `p` uses: else "backward with <gap> not implemented" for the first
// one that it does not (the reference backward throws it, the CPU backward's supports_backward returns it).
Support backward_modelled(const Problem& p);
// The features of `p` that travel in an extension (abi_tag != 0), by protocol name.
std::vector<std::string> extension_features(const Problem& p);
// The plugin and worker hosts' check: every extension feature `p` uses is among the names `declared` (a plugin's
// vtable features, a worker's capabilities.features); else unsupported, naming the first missing one and `who`.
template <class Names>
Support declared_extensions(const Problem& p, const Names& declared, const char* who) {
  for (const std::string& f : extension_features(p))
    if (std::find(declared.begin(), declared.end(), f) == declared.end())
      return Support::no(f + " not supported (not among the " + who + "'s declared features)");
  return Support::yes();
}
// Sets the Capabilities flag of every extension feature whose protocol name is in `names` (a plugin's declaration);
// "fp8" also adds the fp8 formats to the dtypes (and their absence removes them); the name of a library
// modification (mods.hpp) adds it to Capabilities::mods.
void declare_extension_features(Capabilities& c, const std::vector<std::string>& names);

}  // namespace model
}  // namespace attncheck
