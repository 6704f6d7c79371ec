// The module problem's names, enums and validation (module_problem.hpp). Every error names the field and values,
// so that a malformed module fixture or import is exit 2 with the field in the message.
#include <sstream>

#include "attncheck/module_problem.hpp"

namespace attncheck {
inline namespace model {

namespace {
[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument(msg); }

std::string num(int64_t v) { return std::to_string(v); }

void check_tensor(const char* field, const std::optional<Tensor>& t, bool wanted, DType dtype,
                  const std::vector<int64_t>& shape, const std::string& why) {
  if (!wanted) {
    if (t) fail(std::string(field) + ": given, but " + why);
    return;
  }
  if (!t) fail(std::string(field) + ": missing (" + why + ")");
  if (t->dtype != dtype)
    fail(std::string(field) + ": dtype " + to_string(t->dtype) + ", expected the module's " + to_string(dtype));
  if (t->shape != shape)
    fail(std::string(field) + ": shape " + shape_string(t->shape) + " does not chain: expected " + shape_string(shape));
}
}  // namespace

const char* to_string(Packing p) {
  switch (p) {
    case Packing::separate: return "separate";
    case Packing::packed: return "packed";
    case Packing::interleaved: return "interleaved";
  }
  return "?";
}

Packing packing_from_string(const std::string& s) {
  for (Packing p : {Packing::separate, Packing::packed, Packing::interleaved})
    if (s == to_string(p)) return p;
  fail("packing: unknown value '" + s + "' (expected separate, packed or interleaved)");
}

const char* to_string(ModuleFault f) {
  switch (f) {
    case ModuleFault::none: return "none";
    case ModuleFault::head_split: return "head-split";
    case ModuleFault::qkv_order: return "qkv-order";
    case ModuleFault::scale_d_model: return "scale-d-model";
    case ModuleFault::key_padding_broadcast: return "key-padding-broadcast";
    case ModuleFault::weights_average: return "weights-average";
    case ModuleFault::out_bias: return "out-bias";
    case ModuleFault::dropout_after_projection: return "dropout-after-projection";
  }
  return "?";
}

std::vector<ModuleFault> module_faults() {
  return {ModuleFault::head_split,
          ModuleFault::qkv_order,
          ModuleFault::scale_d_model,
          ModuleFault::key_padding_broadcast,
          ModuleFault::weights_average,
          ModuleFault::out_bias,
          ModuleFault::dropout_after_projection};
}

ModuleFault module_fault_from_string(const std::string& s) {
  for (ModuleFault f : module_faults())
    if (s == to_string(f)) return f;
  fail("module fault: unknown tag '" + s + "'");
}

bool is_key_padding(const ModuleProblem& m) {
  const auto& s = m.attn.mask_shape;
  return s && (*s)[0] == m.attn.B && (*s)[1] == 1 && (*s)[2] == 1 && (*s)[3] == m.attn.Lk;
}

bool fault_applies(ModuleFault f, const ModuleProblem& m) {
  const Problem& p = m.attn;
  switch (f) {
    case ModuleFault::none: return false;
    case ModuleFault::head_split: return p.Hq > 1 || p.Hkv > 1;
    case ModuleFault::qkv_order: return m.packing != Packing::separate && p.Hkv > 1;
    case ModuleFault::scale_d_model: return p.Hq > 1 && !p.scale;
    case ModuleFault::key_padding_broadcast: return is_key_padding(m) && !m.cross();
    case ModuleFault::weights_average: return p.want_weights && m.average_weights && p.Hq > 1;
    case ModuleFault::out_bias: return m.out_bias;
    case ModuleFault::dropout_after_projection: return p.dropout_p > 0;
  }
  return false;
}

std::string ModuleProblem::name() const {
  const Problem& p = attn;
  std::ostringstream o;
  o << to_string(p.dtype) << "/module-B" << p.B << "-L" << p.Lq << "x" << p.Lk << "-d" << d_in;
  if (cross()) o << "x" << d_in2;
  o << "-H" << p.Hq << "x" << p.Hkv << "-D" << p.Dqk << "x" << p.Dv << "-o" << d_out;
  o << "/" << (cross() ? "cross" : "self") << "/" << to_string(packing);
  if (qkv_bias) o << "/bias";
  if (out_bias) o << "/obias";
  // The attention's features: its short name after the shape component.
  const std::string an = p.short_name();
  const size_t a = an.find('/'), b = a == std::string::npos ? a : an.find('/', a + 1);
  if (b != std::string::npos) o << an.substr(b);
  if (p.want_weights) o << (average_weights ? "/avgw" : "/headw");
  return o.str();
}

void validate(const ModuleProblem& m) {
  const Problem& p = m.attn;
  validate(p);
  const DType t = p.dtype;
  if (t != DType::f64 && t != DType::f32 && t != DType::f16 && t != DType::bf16)
    fail(std::string("dtype: the module supports fp64, fp32, fp16 and bf16, got ") + to_string(t));
  if (p.layout != Layout::BHSD) fail("layout: the module's attention is BHSD (heads are split by the module)");
  if (p.want_lse || p.scores_out != ScoresOut::none || p.past_len > 0 || p.page_size > 0 || !p.cu_seqlens_q.empty())
    fail(
        "attn: lse, scores, KV-cache append, paged KV and varlen are attention-level features the module does not "
        "pass through");
  if (m.d_in < 1) fail("d_in: must be >= 1, got " + num(m.d_in));
  if (m.d_in2 < 0) fail("d_in2: must be >= 0 (0 = self attention), got " + num(m.d_in2));
  if (m.d_out < 1) fail("d_out: must be >= 1, got " + num(m.d_out));
  if (!m.cross() && p.Lk != p.Lq)
    fail("Lk: self attention takes keys from x, so Lk must equal Lq=" + num(p.Lq) + ", got " + num(p.Lk));
  if (m.cross() && m.packing != Packing::separate && m.d_in2 != m.d_in)
    fail("d_in2: a packed weight projects x and x2 with one in-feature count, so d_in2 must equal d_in=" + num(m.d_in) +
         ", got " + num(m.d_in2));
  if (!m.attn.want_weights && m.average_weights)
    fail("average_weights: set, but the weights are not an output (want_weights is off)");
}

void validate(const ModuleProblem& m, const ModuleInputs& in) {
  validate(m);
  const Problem& p = m.attn;
  const DType t = p.dtype;
  check_tensor("x", in.x, true, t, {p.B, p.Lq, m.d_in}, "");
  check_tensor("x2", in.x2, m.cross(), t, {p.B, p.Lk, m.d_in2}, m.cross() ? "cross attention" : "self attention");
  const bool sep = m.packing == Packing::separate;
  const std::string sep_why = sep ? "separate weights" : std::string(to_string(m.packing)) + " weights";
  check_tensor("wq", in.wq, sep, t, {m.rows_q(), m.d_in}, sep_why);
  check_tensor("wk", in.wk, sep, t, {m.rows_k(), m.d_kv()}, sep_why);
  check_tensor("wv", in.wv, sep, t, {m.rows_v(), m.d_kv()}, sep_why);
  const std::string bias_why = m.qkv_bias ? "qkv_bias is on" : "qkv_bias is off";
  check_tensor("bq", in.bq, sep && m.qkv_bias, t, {m.rows_q()}, sep ? bias_why : sep_why);
  check_tensor("bk", in.bk, sep && m.qkv_bias, t, {m.rows_k()}, sep ? bias_why : sep_why);
  check_tensor("bv", in.bv, sep && m.qkv_bias, t, {m.rows_v()}, sep ? bias_why : sep_why);
  const int64_t rows = m.rows_q() + m.rows_k() + m.rows_v();
  check_tensor("wqkv", in.wqkv, !sep, t, {rows, m.d_in}, sep_why);
  check_tensor("bqkv", in.bqkv, !sep && m.qkv_bias, t, {rows}, sep ? sep_why : bias_why);
  check_tensor("wo", in.wo, true, t, {m.d_out, p.Hq * p.Dv}, "");
  check_tensor("bo", in.bo, m.out_bias, t, {m.d_out}, m.out_bias ? "out_bias is on" : "out_bias is off");
  Problem q = p;  // the attention's own tensors, checked by the attention's validation
  q.dtype = DType::f64;
  validate(q, Inputs{make_qkv(q, 0), make_qkv(q, 1), make_qkv(q, 2), in.mask, in.bias, in.keep, {}, {}});
}

ModuleInputs make_module_inputs(const ModuleProblem& m) {
  validate(m);
  const Problem& p = m.attn;
  const DType t = p.dtype;
  ModuleInputs in;
  in.x = Tensor(t, {p.B, p.Lq, m.d_in});
  if (m.cross()) in.x2 = Tensor(t, {p.B, p.Lk, m.d_in2});
  if (m.packing == Packing::separate) {
    in.wq = Tensor(t, {m.rows_q(), m.d_in});
    in.wk = Tensor(t, {m.rows_k(), m.d_kv()});
    in.wv = Tensor(t, {m.rows_v(), m.d_kv()});
    if (m.qkv_bias) in.bq = Tensor(t, {m.rows_q()}), in.bk = Tensor(t, {m.rows_k()}), in.bv = Tensor(t, {m.rows_v()});
  } else {
    in.wqkv = Tensor(t, {m.rows_q() + m.rows_k() + m.rows_v(), m.d_in});
    if (m.qkv_bias) in.bqkv = Tensor(t, {m.rows_q() + m.rows_k() + m.rows_v()});
  }
  in.wo = Tensor(t, {m.d_out, p.Hq * p.Dv});
  if (m.out_bias) in.bo = Tensor(t, {m.d_out});
  if (p.mask_shape)
    in.mask = Tensor(DType::u8, {(*p.mask_shape)[0], (*p.mask_shape)[1], (*p.mask_shape)[2], (*p.mask_shape)[3]});
  if (p.bias_shape)
    in.bias = Tensor(p.bias_dtype, {(*p.bias_shape)[0], (*p.bias_shape)[1], (*p.bias_shape)[2], (*p.bias_shape)[3]});
  if (p.dropout_p > 0) in.keep = Tensor(DType::u8, {p.B, p.Hq, p.Lq, p.Lk});
  return in;
}

}  // namespace model
}  // namespace attncheck
