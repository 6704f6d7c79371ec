// Names of the problem's enumerations, and parsing them back (errors name the field and the choices).
#include "attncheck/problem.hpp"
#include "detail.hpp"

namespace attncheck {
inline namespace model {

using detail::fail;

// ---- enums -------------------------------------------------------------------------------------------------
const char* to_string(Layout l) { return l == Layout::BHSD ? "BHSD" : "BSHD"; }
Layout layout_from_string(const std::string& s) {
  if (s == "BHSD" || s == "bhsd") return Layout::BHSD;
  if (s == "BSHD" || s == "bshd") return Layout::BSHD;
  fail("layout: unknown value '" + s + "' (expected BHSD or BSHD)");
}
const char* to_string(Alignment a) {
  switch (a) {
    case Alignment::top_left: return "top_left";
    case Alignment::bottom_right: return "bottom_right";
    case Alignment::explicit_: return "offset";
  }
  return "?";
}
Alignment alignment_from_string(const std::string& s) {
  if (s == "top_left" || s == "tl") return Alignment::top_left;
  if (s == "bottom_right" || s == "br") return Alignment::bottom_right;
  if (s == "offset" || s == "explicit") return Alignment::explicit_;
  fail("alignment: unknown value '" + s + "' (expected top_left, bottom_right, offset)");
}
const char* to_string(MaskFill f) { return f == MaskFill::neg_inf ? "neg_inf" : "finite"; }
MaskFill fill_from_string(const std::string& s) {
  if (s == "neg_inf" || s == "-inf") return MaskFill::neg_inf;
  if (s == "finite") return MaskFill::finite;
  fail("fill: unknown value '" + s + "' (expected neg_inf or finite)");
}
const char* to_string(ScoresOut s) {
  switch (s) {
    case ScoresOut::none: return "none";
    case ScoresOut::scaled: return "scaled";
    case ScoresOut::capped: return "capped";
    case ScoresOut::masked: return "masked";
  }
  return "?";
}
ScoresOut scores_out_from_string(const std::string& s) {
  for (ScoresOut v : {ScoresOut::none, ScoresOut::scaled, ScoresOut::capped, ScoresOut::masked})
    if (s == to_string(v)) return v;
  fail("scores_out: unknown value '" + s + "' (expected none, scaled, capped, masked)");
}
const char* to_string(MaxLogitOut m) {
  switch (m) {
    case MaxLogitOut::none: return "none";
    case MaxLogitOut::rows: return "rows";
    case MaxLogitOut::heads: return "heads";
  }
  return "?";
}
MaxLogitOut max_logit_from_string(const std::string& s) {
  for (MaxLogitOut v : {MaxLogitOut::none, MaxLogitOut::rows, MaxLogitOut::heads})
    if (s == to_string(v)) return v;
  fail("max_logit: unknown value '" + s + "' (expected none, rows, heads)");
}
const char* to_string(FullyMasked p) {
  switch (p) {
    case FullyMasked::nan: return "nan";
    case FullyMasked::zero: return "zero";
    case FullyMasked::uniform: return "uniform";
  }
  return "?";
}
const char* to_string(KvScales g) {
  switch (g) {
    case KvScales::none: return "none";
    case KvScales::tensor: return "tensor";
    case KvScales::head: return "head";
    case KvScales::token: return "token";
    case KvScales::block: return "block";
  }
  return "?";
}
KvScales kv_scales_from_string(const std::string& s) {
  for (KvScales g : {KvScales::none, KvScales::tensor, KvScales::head, KvScales::token, KvScales::block})
    if (s == to_string(g)) return g;
  fail("kv_scales: unknown value '" + s + "' (expected none, tensor, head, token, block)");
}
FullyMasked fully_masked_from_string(const std::string& s) {
  if (s == "nan") return FullyMasked::nan;
  if (s == "zero") return FullyMasked::zero;
  if (s == "uniform") return FullyMasked::uniform;
  fail("fully_masked: unknown value '" + s + "' (expected nan, zero, uniform)");
}

}  // namespace model
}  // namespace attncheck
