// Problems and capabilities as worker-protocol JSON (docs/worker-protocol.md), with errors that name the message
// and the field, e.g. "reply to run 7: field 'status': expected a string, got 3".
#include "worker_json.hpp"

#include "attncheck/features.hpp"
#include "attncheck/mods.hpp"

namespace attncheck::worker {

namespace {
[[noreturn]] void bad(const std::string& where, const std::string& key, const std::string& expected, const json& got) {
  throw ProtocolError(where + ": field '" + key + "': expected " + expected + ", got " + got.dump());
}

std::vector<int64_t> int_list(const json& j, const std::string& where, const std::string& key) {
  std::vector<int64_t> v;
  if (j.is_null()) return v;
  if (!j.is_array()) bad(where, key, "an array of integers or null", j);
  for (const auto& x : j) {
    if (!x.is_number_integer()) bad(where, key, "an array of integers", j);
    v.push_back(x.get<int64_t>());
  }
  return v;
}

std::optional<std::array<int64_t, 4>> shape4(const json& j, const std::string& where, const std::string& key) {
  if (j.is_null()) return std::nullopt;
  const auto v = int_list(j, where, key);
  if (v.size() != 4) bad(where, key, "4 integers or null", j);
  return std::array<int64_t, 4>{v[0], v[1], v[2], v[3]};
}

template <class F>
auto parse_enum(const json& obj, const std::string& where, const std::string& key, F from_string) {
  const std::string s = str_field(obj, where, key);
  try {
    return from_string(s);
  } catch (const std::exception& e) {
    throw ProtocolError(where + ": field '" + key + "': " + e.what());
  }
}
}  // namespace

const json& field(const json& obj, const std::string& where, const std::string& key) {
  if (!obj.is_object()) throw ProtocolError(where + ": expected a JSON object, got " + obj.dump());
  const auto it = obj.find(key);
  if (it == obj.end()) throw ProtocolError(where + ": field '" + key + "' is missing");
  return *it;
}
std::string str_field(const json& obj, const std::string& where, const std::string& key) {
  const json& j = field(obj, where, key);
  if (!j.is_string()) bad(where, key, "a string", j);
  return j.get<std::string>();
}
int64_t int_field(const json& obj, const std::string& where, const std::string& key) {
  const json& j = field(obj, where, key);
  if (!j.is_number_integer()) bad(where, key, "an integer", j);
  return j.get<int64_t>();
}
double num_field(const json& obj, const std::string& where, const std::string& key) {
  const json& j = field(obj, where, key);
  if (!j.is_number()) bad(where, key, "a number", j);
  return j.get<double>();
}
bool bool_field(const json& obj, const std::string& where, const std::string& key) {
  const json& j = field(obj, where, key);
  if (!j.is_boolean()) bad(where, key, "true or false", j);
  return j.get<bool>();
}

std::string dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::u8: return "u8";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::i8: return "i8";
    case DType::q4_0: return "q4_0";  // never sent: workers are not offered 4-bit caches
    case DType::q4_1: return "q4_1";
  }
  return "?";
}
std::string layout_name(Layout l) { return l == Layout::BHSD ? "bhsd" : "bshd"; }
std::string alignment_name(Alignment a) { return a == Alignment::explicit_ ? "explicit" : to_string(a); }

json problem_to_json(const Problem& p) {
  json d = json::array();
  for (int64_t b = 0; b < p.B; ++b) d.push_back(p.diagonal_offset(b));
  auto list_or_null = [](const std::vector<int64_t>& v) { return v.empty() ? json(nullptr) : json(v); };
  auto shape_or_null = [](const auto& s) { return s ? json(*s) : json(nullptr); };
  // Non-finite doubles are not JSON: fill_value, scale and the logit stage's parameters are finite by validate().
  json j = {{"name", p.name()},
            {"B", p.B},
            {"Hq", p.Hq},
            {"Hkv", p.Hkv},
            {"Lq", p.Lq},
            {"Lk", p.Lk},
            {"Dqk", p.Dqk},
            {"Dv", p.Dv},
            {"dtype", dtype_name(p.dtype)},
            {"layout", layout_name(p.layout)},
            {"stat_dtype", dtype_name(p.stat_dtype())},
            {"scale", p.effective_scale()},
            {"causal", p.causal},
            {"alignment", alignment_name(p.alignment)},
            {"diagonal_offset", d},
            {"causal_offsets", list_or_null(p.causal_offsets)},
            {"causal_offset", p.causal_offset},
            {"key_lengths", list_or_null(p.key_lengths)},
            {"window_left", p.window_left},
            {"window_right", p.window_right},
            {"mask_shape", shape_or_null(p.mask_shape)},
            {"bias_shape", shape_or_null(p.bias_shape)},
            {"bias_dtype", dtype_name(p.bias_dtype)},
            {"fill", to_string(p.fill)},
            {"fill_value", p.fill_value},
            {"fully_masked", to_string(p.fully_masked)},
            {"dropout_p", p.dropout_p},
            {"dropout_seed", p.dropout_seed},
            {"want_lse", p.want_lse},
            {"want_weights", p.want_weights}};
  // The logit stage's parameters (mods.hpp): protocol 1 fields, numbers, always present.
  for (const ModEntry& m : logit_modifications()) j[m.fields[0].key] = logit_parameter(p, m);
  if (p.max_logit != MaxLogitOut::none)
    j["max_logit"] = to_string(p.max_logit);  // feature "max_logit": the tensor's shape
  if (is_fp8(p.dtype))                        // fp8 (feature "fp8"): the codes' factors, and out's dtype (not `dtype`)
    j.update({{"descale_q", p.descale_q},
              {"descale_k", p.descale_k},
              {"descale_v", p.descale_v},
              {"out_dtype", dtype_name(p.out_dtype())}});
  return j;
}

json merge_problem_to_json(const MergeProblem& p) {
  return {{"name", p.name},
          {"N", p.N},
          {"B", p.B},
          {"H", p.H},
          {"L", p.L},
          {"D", p.D},
          {"dtype", dtype_name(p.dtype)},
          {"conventions", p.conv.text()}};
}

MergeProblem merge_problem_from_json(const json& j, const std::string& where) {
  const std::string w = where + ": problem";
  MergeProblem p;
  p.name = str_field(j, w, "name");
  for (auto [k, f] : {std::pair{"N", &MergeProblem::N},
                      {"B", &MergeProblem::B},
                      {"H", &MergeProblem::H},
                      {"L", &MergeProblem::L},
                      {"D", &MergeProblem::D}})
    p.*f = int_field(j, w, k);
  p.dtype = parse_enum(j, w, "dtype", dtype_from_string);
  p.conv = parse_enum(j, w, "conventions", parse_conventions);
  try {
    validate(p);
  } catch (const std::exception& e) {
    throw ProtocolError(w + ": " + e.what());
  }
  return p;
}

json module_problem_to_json(const ModuleProblem& m) {
  return {{"name", m.name()},
          {"attention", problem_to_json(m.attn)},
          {"d_in", m.d_in},
          {"d_in2", m.d_in2},
          {"d_out", m.d_out},
          {"packing", to_string(m.packing)},
          {"qkv_bias", m.qkv_bias},
          {"out_bias", m.out_bias},
          {"average_weights", m.average_weights}};
}

ModuleProblem module_problem_from_json(const json& j, const std::string& where) {
  const std::string w = where + ": problem";
  ModuleProblem m;
  m.attn = problem_from_json(field(j, w, "attention"), w + ".attention");
  m.d_in = int_field(j, w, "d_in"), m.d_in2 = int_field(j, w, "d_in2"), m.d_out = int_field(j, w, "d_out");
  m.packing = parse_enum(j, w, "packing", packing_from_string);
  m.qkv_bias = bool_field(j, w, "qkv_bias"), m.out_bias = bool_field(j, w, "out_bias");
  m.average_weights = bool_field(j, w, "average_weights");
  try {
    validate(m);
  } catch (const std::exception& e) {
    throw ProtocolError(w + ": " + e.what());
  }
  return m;
}

std::vector<std::pair<const char*, const Tensor*>> module_input_tensors(const ModuleInputs& in) {
  std::vector<std::pair<const char*, const Tensor*>> out = {{"x", &in.x}, {"wo", &in.wo}};
  const auto add = [&](const char* name, const std::optional<Tensor>& t) {
    if (t) out.emplace_back(name, &*t);
  };
  add("x2", in.x2);
  for (const ModuleProjection& w : kModuleProjections) add(w.name, in.*w.tensor);
  add("bo", in.bo), add("mask", in.mask), add("bias", in.bias), add("keep", in.keep);
  return out;
}

Problem problem_from_json(const json& j, const std::string& where) {
  const std::string w = where + ": problem";
  Problem p;
  for (auto [k, f] : {std::pair{"B", &Problem::B},
                      {"Hq", &Problem::Hq},
                      {"Hkv", &Problem::Hkv},
                      {"Lq", &Problem::Lq},
                      {"Lk", &Problem::Lk},
                      {"Dqk", &Problem::Dqk},
                      {"Dv", &Problem::Dv},
                      {"causal_offset", &Problem::causal_offset},
                      {"window_left", &Problem::window_left},
                      {"window_right", &Problem::window_right}})
    p.*f = int_field(j, w, k);
  p.dtype = parse_enum(j, w, "dtype", dtype_from_string);
  p.layout = parse_enum(j, w, "layout", layout_from_string);
  p.scale = num_field(j, w, "scale");
  p.causal = bool_field(j, w, "causal");
  p.alignment = parse_enum(j, w, "alignment", alignment_from_string);
  p.causal_offsets = int_list(field(j, w, "causal_offsets"), w, "causal_offsets");
  p.key_lengths = int_list(field(j, w, "key_lengths"), w, "key_lengths");
  for (const ModEntry& m : logit_modifications()) set_logit_parameter(p, m, num_field(j, w, m.fields[0].key));
  p.mask_shape = shape4(field(j, w, "mask_shape"), w, "mask_shape");
  p.bias_shape = shape4(field(j, w, "bias_shape"), w, "bias_shape");
  p.bias_dtype = parse_enum(j, w, "bias_dtype", dtype_from_string);
  p.fill = parse_enum(j, w, "fill", fill_from_string);
  p.fill_value = num_field(j, w, "fill_value");
  p.fully_masked = parse_enum(j, w, "fully_masked", fully_masked_from_string);
  p.dropout_p = num_field(j, w, "dropout_p");
  p.dropout_seed = static_cast<uint64_t>(int_field(j, w, "dropout_seed"));
  p.want_lse = bool_field(j, w, "want_lse");
  p.want_weights = bool_field(j, w, "want_weights");
  // fp8 (feature "fp8"): the descales travel as numbers, not only in the name
  for (auto [k, f] : {std::pair{"descale_q", &Problem::descale_q},
                      {"descale_k", &Problem::descale_k},
                      {"descale_v", &Problem::descale_v}})
    if (j.contains(k)) p.*f = num_field(j, w, k);
  if (j.contains("max_logit")) p.max_logit = parse_enum(j, w, "max_logit", max_logit_from_string);
  // Fields the protocol does not spell out (features added through the feature table) travel in the lossless
  // name; a worker is only sent them when it declared the feature.
  if (j.contains("name") && j["name"].is_string()) {
    try {
      const Problem named = parse_name(j["name"].get<std::string>());
      for (const Field& f : problem_fields())
        if (!j.contains(f.key) && f.stored != Stored::derived && !field_is_default(named, f))
          set_field_text(p, f, field_text(named, f));
    } catch (const std::exception& e) {
      throw ProtocolError(w + ": name: " + e.what());
    }
  }
  try {
    validate(p);
  } catch (const std::exception& e) {
    throw ProtocolError(w + ": " + e.what());
  }
  return p;
}

json block_mask_to_json(const BlockMask& m) {
  return {{"q_block", m.q_block},
          {"kv_block", m.kv_block},
          {"B", m.B},
          {"H", m.H},
          {"q_blocks", m.q_blocks},
          {"slots", m.slots},
          {"kv_num_blocks", m.kv_num_blocks},
          {"kv_indices", m.kv_indices},
          {"full_kv_num_blocks", m.full_kv_num_blocks},
          {"full_kv_indices", m.full_kv_indices}};
}

BlockMask block_mask_from_json(const json& j, const std::string& where, const Problem& p) {
  const std::string w = where + ": block_mask";
  if (!j.is_object()) bad(where, "block_mask", "an object", j);
  BlockMask m;
  m.q_block = int_field(j, w, "q_block"), m.kv_block = int_field(j, w, "kv_block");
  m.B = int_field(j, w, "B"), m.H = int_field(j, w, "H");
  m.q_blocks = int_field(j, w, "q_blocks"), m.slots = int_field(j, w, "slots");
  m.kv_num_blocks = int_list(field(j, w, "kv_num_blocks"), w, "kv_num_blocks");
  m.kv_indices = int_list(field(j, w, "kv_indices"), w, "kv_indices");
  m.full_kv_num_blocks = int_list(field(j, w, "full_kv_num_blocks"), w, "full_kv_num_blocks");
  m.full_kv_indices = int_list(field(j, w, "full_kv_indices"), w, "full_kv_indices");
  try {
    validate_block_mask(m, p);
  } catch (const std::invalid_argument& e) {
    throw ProtocolError(w + ": " + e.what());
  }
  return m;
}

json capabilities_to_json(const Capabilities& c) {
  json j;
  j["dtypes"] = json::array();
  for (DType t : c.dtypes) j["dtypes"].push_back(dtype_name(t));
  j["layouts"] = json::array();
  for (Layout l : c.layouts) j["layouts"].push_back(layout_name(l));
  j["alignments"] = json::array();
  for (Alignment a : c.alignments) j["alignments"].push_back(alignment_name(a));
  j["fully_masked"] = json::array();
  for (FullyMasked f : c.fully_masked) j["fully_masked"].push_back(to_string(f));
  j["features"] = json::array();
  for (const Feature& f : problem_features())  // every boolean capability of the table, by its protocol name
    if (f.boolean() && f.declared(c)) j["features"].push_back(f.protocol);
  j["modifications"] = c.mods;  // library modifications (mods.hpp) by name
  j["max_head_dim"] = c.max_head_dim;
  j["head_dim_multiple"] = c.head_dim_multiple;
  j["notes"] = c.notes;
  return j;
}

Capabilities capabilities_from_json(const json& j, const std::string& where) {
  const std::string w = where + ": capabilities";
  auto names = [&](const char* key) {
    const json& a = field(j, w, key);
    if (!a.is_array()) bad(w, key, "an array of strings", a);
    std::vector<std::string> v;
    for (const auto& x : a) {
      if (!x.is_string()) bad(w, key, "an array of strings", a);
      v.push_back(x.get<std::string>());
    }
    return v;
  };
  auto enum_set = [&](const char* key, auto from_string, auto& out) {
    out.clear();
    for (const auto& s : names(key)) {
      try {
        out.insert(from_string(s));
      } catch (const std::exception& e) {
        throw ProtocolError(w + ": field '" + key + "': " + e.what());
      }
    }
  };
  Capabilities c;
  enum_set("dtypes", dtype_from_string, c.dtypes);
  c.dtypes.erase(DType::u8);
  enum_set("layouts", layout_from_string, c.layouts);
  enum_set("alignments", alignment_from_string, c.alignments);
  enum_set("fully_masked", fully_masked_from_string, c.fully_masked);
  const auto features = names("features");
  for (const Feature& f : problem_features())
    if (f.boolean()) f.declare(c, std::find(features.begin(), features.end(), f.protocol) != features.end());
  if (!c.fp8) c.dtypes.erase(DType::e4m3), c.dtypes.erase(DType::e5m2);  // fp8 formats need the feature
  // The protocol returns out, lse, weights and max_logit only: a raw-score, present key/value or amax_o output
  // cannot travel back.
  c.scores_out = false;
  c.kv_append = false;
  c.fp8_out = false;
  c.kv_q4 = false;                  // no k_min / v_min tensors in the protocol
  if (j.contains("modifications"))  // optional: a worker that predates the library declares none
    for (const auto& m : names("modifications")) c.mods.insert(m);
  c.max_head_dim = j.contains("max_head_dim") ? int_field(j, w, "max_head_dim") : 0;
  c.head_dim_multiple = j.contains("head_dim_multiple") ? int_field(j, w, "head_dim_multiple") : 1;
  if (c.max_head_dim < 0 || c.head_dim_multiple < 1)
    throw ProtocolError(w + ": max_head_dim must be >= 0 and head_dim_multiple >= 1, got " +
                        std::to_string(c.max_head_dim) + " and " + std::to_string(c.head_dim_multiple));
  c.notes = j.contains("notes") && j["notes"].is_string() ? j["notes"].get<std::string>() : "";
  return c;
}

json declarations_to_json(const Declarations& d) {
  json j = {{"outputs", d.outputs},
            {"deterministic", d.deterministic},
            {"batch_invariant", d.batch_invariant},
            {"backward", d.backward}};
  if (d.fully_masked_policy) j["fully_masked_policy"] = to_string(*d.fully_masked_policy);
  j["masked_inputs"] = to_string(d.masked_inputs);
  for (const auto& [key, mask] :
       {std::pair{"schedule_knobs", d.schedule_knobs}, {"schedule_bitwise", d.schedule_bitwise}}) {
    j[key] = json::array();
    for (ScheduleKnob k : {knob_threads, knob_num_splits, knob_block_order})
      if (mask & k) j[key].push_back(knob_name(k));
  }
  j["layout_invariant"] = d.layout_invariant;
  j["contract"] = json::object();
  for (const auto& [t, c] : d.contracts) j["contract"][dtype_name(t)] = c.to_string();
  return j;
}

Declarations declarations_from_json(const json& j, const std::string& where, Declarations d) {
  const std::string w = where + ": declarations";
  if (!j.is_object()) throw ProtocolError(w + ": expected a JSON object, got " + j.dump());
  if (j.contains("fully_masked_policy"))
    d.fully_masked_policy = parse_enum(j, w, "fully_masked_policy", fully_masked_from_string);
  if (j.contains("deterministic")) d.deterministic = bool_field(j, w, "deterministic");
  if (j.contains("batch_invariant")) d.batch_invariant = bool_field(j, w, "batch_invariant");
  if (j.contains("masked_inputs")) d.masked_inputs = parse_enum(j, w, "masked_inputs", masked_inputs_from_string);
  if (j.contains("backward")) d.backward = bool_field(j, w, "backward");
  if (j.contains("layout_invariant")) d.layout_invariant = bool_field(j, w, "layout_invariant");
  for (const char* key : {"schedule_knobs", "schedule_bitwise"}) {
    if (!j.contains(key)) continue;
    const json& a = j[key];
    const char* expected = "an array of \"threads\", \"num_splits\", \"block_order\"";
    if (!a.is_array()) bad(w, key, expected, a);
    unsigned mask = 0;
    for (const auto& x : a) {
      if (!x.is_string()) bad(w, key, expected, a);
      try {
        mask |= knob_from_string(x.get<std::string>());
      } catch (const std::invalid_argument&) {
        bad(w, key, expected, a);
      }
    }
    (std::string(key) == "schedule_knobs" ? d.schedule_knobs : d.schedule_bitwise) = mask;
  }
  if (d.schedule_bitwise & ~d.schedule_knobs)
    throw ProtocolError(w + ": field 'schedule_bitwise': " + knob_list(d.schedule_bitwise) +
                        " must be among schedule_knobs (" + knob_list(d.schedule_knobs) + ")");
  if (j.contains("outputs")) {
    const json& o = j["outputs"];
    if (!o.is_array()) bad(w, "outputs", "an array of \"out\", \"lse\", \"weights\"", o);
    d.outputs.clear();
    for (const auto& x : o) {
      if (!x.is_string() || (x != "out" && x != "lse" && x != "weights"))
        bad(w, "outputs", "an array of \"out\", \"lse\", \"weights\"", o);
      d.outputs.push_back(x.get<std::string>());
    }
  }
  if (j.contains("contract")) {
    const json& c = j["contract"];
    if (!c.is_object()) bad(w, "contract", "an object {dtype: contract string}", c);
    for (const auto& [k, v] : c.items()) {
      const std::string key = "contract." + k;
      try {
        const DType t = dtype_from_string(k);
        if (!v.is_string()) bad(w, key, "a contract string such as \"qk=fp16,acc=fp32\"", v);
        PrecisionContract pc = contract_from_string(v.get<std::string>(), t);
        validate_contract(pc, t);
        d.contracts[t] = pc;
      } catch (const ProtocolError&) {
        throw;
      } catch (const std::exception& e) {
        throw ProtocolError(w + ": field '" + key + "': " + e.what());
      }
    }
  }
  return d;
}

}  // namespace attncheck::worker
