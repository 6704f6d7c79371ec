// Problem::name() and parse_name(): a name built from the feature table that parses back to the same problem.
#include <cctype>
#include <sstream>

#include "attncheck/features.hpp"
#include "attncheck/mods.hpp"
#include "detail.hpp"

namespace attncheck {
inline namespace model {

using detail::fail;

// The schema-1 display name, kept byte for byte: golden case names and fixture files are built from it.
std::string Problem::short_name() const {
  std::ostringstream o;
  o << to_string(dtype) << "/B" << B << "-Hq" << Hq << "-Hkv" << Hkv << "-Lq" << Lq << "-Lk" << Lk;
  if (Dqk == Dv)
    o << "-D" << Dqk;
  else
    o << "-Dqk" << Dqk << "-Dv" << Dv;
  std::string feats;
  auto add = [&](const std::string& f) { feats += (feats.empty() ? "" : "-") + f; };
  if (layout == Layout::BSHD) add("bshd");
  if (causal) {
    if (alignment == Alignment::top_left) add("causal-tl");
    if (alignment == Alignment::bottom_right) add("causal-br");
    if (alignment == Alignment::explicit_)
      add("causal-off" + (causal_offsets.empty() ? std::to_string(causal_offset) : std::string("pb")));
  }
  if (!key_lengths.empty()) add("pad");
  if (mask_shape) add("mask");
  if (bias_shape) add("bias");
  if (has_window()) add("win" + std::to_string(window_left) + "_" + std::to_string(window_right));
  for (const ModEntry& m : logit_modifications())  // the logit stage keeps its schema-1 place
    if (m.used(*this)) add(m.marker);
  if (dropout_p > 0) add("drop");
  if (fill == MaskFill::finite) add("finite");
  if (fully_masked != FullyMasked::zero) add(std::string("fm-") + to_string(fully_masked));
  if (scale) add("scaled");
  if (!sinks.empty()) add("sinks");
  if (scores_out != ScoresOut::none) add(std::string("scores-") + to_string(scores_out));
  if (past_len > 0) add("past" + std::to_string(past_len));
  if (!cu_seqlens_q.empty()) add("varlen" + std::to_string(sequences()));
  if (page_size > 0)
    add("paged" + std::to_string(page_size));  // features after schema 1 append here, so older names stay as they were
  if (descale_q != 1.0 || descale_k != 1.0 || descale_v != 1.0) add("descaled");
  if (kv_quantized())  // e.g. kv-int8-block32-f16s
    add(std::string("kv-") +
        (kv_dtype == DType::i8     ? "int8"
         : kv_dtype == DType::e4m3 ? "e4m3"
         : kv_dtype == DType::e5m2 ? "e5m2"
                                   : to_string(kv_dtype)) +
        "-" + to_string(kv_scales) + (kv_scales == KvScales::block ? std::to_string(kv_block) : "") +
        (kv_scale_dtype == DType::f32 ? "" : std::string("-") + (kv_scale_dtype == DType::f16 ? "f16s" : "bf16s")));
  if (mla) add("mla");
  for (const ModEntry* m : used_modifications(*this)) add(m->marker);
  if (max_logit != MaxLogitOut::none) add(std::string("maxlogit-") + to_string(max_logit));
  if (fp8_out) add(std::string("out-") + (o_dtype == DType::e4m3 ? "e4m3" : "e5m2"));
  o << '/' << (feats.empty() ? std::string("plain") : feats);
  return o.str();
}

namespace {
const char* const kShapeKeys[] = {"B", "Hq", "Hkv", "Lq", "Lk"};
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t a = 0;
  for (size_t b; (b = s.find(sep, a)) != std::string::npos; a = b + 1) out.push_back(s.substr(a, b - a));
  out.push_back(s.substr(a));
  return out;
}
}  // namespace

// "<dtype>/B2-Hq4-Hkv2-Lq13-Lk17-D16/<key=value>/..." with one component per field that differs from its
// default (a true bool is just its key), in table order; "plain" when none does.
std::string Problem::name() const {
  std::string shape;
  // Appends rather than "literal" + std::string temporaries: gcc 12 warns falsely on those (-Wrestrict, GCC PR 105329).
  for (const char* k : kShapeKeys) {
    if (!shape.empty()) shape += '-';
    shape.append(k).append(field_text(*this, *find_field(k)));
  }
  shape += Dqk == Dv ? "-D" + std::to_string(Dqk) : "-Dqk" + std::to_string(Dqk) + "-Dv" + std::to_string(Dv);
  std::string frags;
  for (const Field& f : problem_fields()) {
    if (f.named != Named::fragment || field_is_default(*this, f)) continue;
    // A true bool is just its key; a false one (a bool whose default is true) is "key=0".
    const bool flag = std::holds_alternative<bool Problem::*>(f.ref) && field_text(*this, f) == "1";
    frags.append("/").append(f.key);
    if (!flag) frags.append("=").append(field_text(*this, f));
  }
  return std::string(to_string(dtype)) + "/" + shape + (frags.empty() ? "/plain" : frags);
}

Problem parse_name(const std::string& name) {
  const std::vector<std::string> parts = split(name, '/');
  if (parts.size() < 3) fail("name '" + name + "': expected <dtype>/<shape>/<features or plain>");
  Problem p;
  p.dtype = dtype_from_string(parts[0]);
  for (const std::string& tok : split(parts[1], '-')) {
    size_t n = 0;
    while (n < tok.size() && std::isalpha(static_cast<unsigned char>(tok[n]))) ++n;
    const std::string key = tok.substr(0, n), value = tok.substr(n);
    if (key == "D") {
      set_field_text(p, *find_field("Dqk"), value);
      p.Dv = p.Dqk;
      continue;
    }
    const Field* f = find_field(key);
    if (!f || f->named != Named::shape) fail("name '" + name + "': unknown shape entry '" + tok + "'");
    set_field_text(p, *f, value);
  }
  if (!(parts.size() == 3 && parts[2] == "plain"))
    for (size_t i = 2; i < parts.size(); ++i) {
      const size_t eq = parts[i].find('=');
      const std::string key = parts[i].substr(0, eq);
      const Field* f = find_field(key);
      if (!f || f->named != Named::fragment) fail("name '" + name + "': unknown feature '" + key + "'");
      set_field_text(p, *f, eq == std::string::npos ? "1" : parts[i].substr(eq + 1));
    }
  validate(p);
  return p;
}

}  // namespace model
}  // namespace attncheck
