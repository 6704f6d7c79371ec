// CaseSpec -> Problem + Inputs, capability restriction, size budgets, and the derived cases (canonical masks,
// key/query slices and permutations) that metamorphic properties compare against each other.
#include "case.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <sstream>

namespace attncheck::prop {

const char* to_string(Values v) {
  static const char* names[] = {"normal",  "large_logits", "beyond_fp16", "tied_max", "all_equal",
                                "one_hot", "constant_v",   "tiny",        "mixed"};
  return static_cast<size_t>(v) < std::size(names) ? names[static_cast<size_t>(v)] : "?";
}

double normal(SeededChooser& r) {
  const double u1 = ((r.next() >> 11) + 1) * 0x1.0p-53, u2 = (r.next() >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

const double* CaseSpec::logit_of(const std::string& name) const {
  for (const auto& [n, v] : logit)
    if (n == name) return &v;
  return nullptr;
}

std::string CaseSpec::str() const {
  std::ostringstream o;
  o << "B=" << B << " Hq=" << Hq << " Hkv=" << Hkv << " Lq=" << Lq << " Lk=" << Lk << " Dqk=" << Dqk << " Dv=" << Dv
    << " dtype=" << to_string(dtype) << " layout=" << to_string(layout) << " causal=" << causal
    << " alignment=" << to_string(alignment) << " offset=" << causal_offset << " per_batch=" << per_batch_offsets
    << " key_padding=" << key_padding << " mask=" << mask_kind << "@" << mask_density << "% bias=" << bias_kind
    << " window=" << window_left << "," << window_right;
  for (const ModEntry& m : logit_modifications())
    o << " " << m.name << "=" << (logit_of(m.name) ? *logit_of(m.name) : 0.0);
  o << " finite_fill=" << finite_fill << " fully_masked=" << to_string(fully_masked) << " scale_kind=" << scale_kind
    << " dropout=" << dropout_p << " values=" << to_string(values) << " poison=" << poison
    << " empty_rows=" << empty_rows << " lse=" << want_lse << " weights=" << want_weights << " seed=" << seed;
  if (sinks_kind) o << " sinks=" << sinks_kind;
  if (scores_out != ScoresOut::none) o << " scores_out=" << to_string(scores_out);
  if (kv_append) o << " kv_append=1";
  if (varlen) o << " varlen=1";
  if (paged) o << " paged=1";
  for (const std::string& m : mods) o << " mod=" << m;
  return o.str();
}

std::string Case::name() const { return p.short_name() + "/" + to_string(spec.values); }

void normalise(CaseSpec& s) {
  s.Hkv = std::max<int64_t>(1, s.Hkv);
  if (s.Hq % s.Hkv) s.Hq = s.Hkv * std::max<int64_t>(1, s.Hq / s.Hkv);
  if (!s.causal && s.window_left < 0 && s.window_right < 0) s.alignment = Alignment::top_left;
  if (s.alignment != Alignment::explicit_) s.per_batch_offsets = false;
  if (s.empty_rows && !s.key_padding && s.mask_kind == 0 && !(s.causal && s.alignment == Alignment::explicit_))
    s.mask_kind = 1;
}

std::vector<std::string> restrict_to(CaseSpec& s, const Capabilities& c) {
  std::vector<std::string> removed;
  auto off = [&](bool cond, const char* what, auto&& action) {
    if (cond) {
      action();
      removed.push_back(what);
    }
  };
  if (!c.dtypes.count(s.dtype)) {
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64})
      if (c.dtypes.count(t)) {
        s.dtype = t;
        break;
      }
    removed.push_back("dtype");
  }
  off(!c.layouts.count(s.layout), "layout", [&] { s.layout = *c.layouts.begin(); });
  off(!c.gqa && s.Hq != s.Hkv, "gqa", [&] { s.Hkv = s.Hq; });
  off(!c.cross && s.Lq != s.Lk, "cross", [&] { s.Lk = s.Lq; });
  off(!c.dqk_ne_dv && s.Dqk != s.Dv, "dqk_ne_dv", [&] { s.Dv = s.Dqk; });
  if (c.head_dim_multiple > 1) {
    auto up = [&](int64_t d) { return (d + c.head_dim_multiple - 1) / c.head_dim_multiple * c.head_dim_multiple; };
    off(s.Dqk % c.head_dim_multiple || s.Dv % c.head_dim_multiple, "head_dim_multiple", [&] {
      s.Dqk = up(s.Dqk);
      s.Dv = up(s.Dv);
    });
  }
  if (c.max_head_dim > 0)
    off(s.Dqk > c.max_head_dim || s.Dv > c.max_head_dim, "max_head_dim", [&] {
      s.Dqk = std::min(s.Dqk, c.max_head_dim);
      s.Dv = std::min(s.Dv, c.max_head_dim);
    });
  off(s.causal && !c.causal, "causal", [&] { s.causal = false; });
  const bool uses_alignment = s.causal || s.window_left >= 0 || s.window_right >= 0;
  off(uses_alignment && !c.alignments.count(s.alignment), "alignment", [&] {
    s.alignment = Alignment::top_left;
    if (!c.alignments.count(s.alignment)) s.causal = false, s.window_left = s.window_right = -1;
  });
  off(s.per_batch_offsets && !c.per_batch_offsets, "per_batch_offsets", [&] { s.per_batch_offsets = false; });
  off(s.key_padding && !c.key_padding, "key_padding", [&] { s.key_padding = false; });
  off(s.mask_kind && !c.bool_mask, "bool_mask", [&] { s.mask_kind = 0; });
  off(s.bias_kind && !c.bias, "bias", [&] { s.bias_kind = 0; });
  off((s.window_left >= 0 || s.window_right >= 0) && !c.window, "window", [&] { s.window_left = s.window_right = -1; });
  for (const ModEntry& m : logit_modifications())
    off(s.logit_of(m.name) && !c.logit.count(m.name), m.name,
        [&] { std::erase_if(s.logit, [&](const auto& e) { return e.first == m.name; }); });
  off(s.dropout_p > 0 && !c.dropout, "dropout", [&] { s.dropout_p = 0; });
  off(s.finite_fill && !c.finite_fill, "finite_fill", [&] { s.finite_fill = false; });
  off(!c.fully_masked.count(s.fully_masked), "fully_masked", [&] { s.fully_masked = *c.fully_masked.begin(); });
  off(s.want_weights && !c.weights_out, "weights_out", [&] { s.want_weights = false; });
  off(s.want_lse && !c.lse_out, "lse_out", [&] { s.want_lse = false; });
  off(s.sinks_kind && !c.sinks, "sinks", [&] { s.sinks_kind = 0; });
  off(s.scores_out != ScoresOut::none && !c.scores_out, "scores_out", [&] { s.scores_out = ScoresOut::none; });
  off(s.kv_append && !c.kv_append, "kv_append", [&] { s.kv_append = false; });
  off(s.varlen && !c.varlen, "varlen", [&] { s.varlen = false; });
  off(s.paged && !c.paged_kv, "paged_kv", [&] { s.paged = false; });
  off(std::any_of(s.mods.begin(), s.mods.end(), [&](const std::string& m) { return !c.mods.count(m); }),
      "modifications", [&] { s.mods.clear(); });
  if (!s.causal && s.window_left < 0 && s.window_right < 0) s.alignment = Alignment::top_left;
  if (s.alignment != Alignment::explicit_) s.per_batch_offsets = false;
  return removed;
}

void apply_budget(CaseSpec& s, int64_t budget) {
  // Order: batch, extra heads (a GQA group of 2 survives), head dims down to 4, then lengths (last: they carry
  // the tile edge cases).
  while (s.cost() > budget) {
    if (s.B > 1) {
      s.B = 1;
    } else if (s.Hq > s.Hkv * 2) {
      s.Hq = s.Hkv * 2;
    } else if (s.Hkv > 1) {
      s.Hq = s.Hq / s.Hkv;
      s.Hkv = 1;
    } else if (std::max(s.Dqk, s.Dv) > 4) {
      (s.Dqk >= s.Dv ? s.Dqk : s.Dv) /= 2;
    } else if (std::max(s.Lq, s.Lk) > 1) {
      (s.Lq >= s.Lk ? s.Lq : s.Lk) -= std::max<int64_t>(1, std::max(s.Lq, s.Lk) / 4);
    } else {
      break;
    }
  }
}

}  // namespace attncheck::prop
