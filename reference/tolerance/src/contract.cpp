// The precision contract: names, defaults per dtype and the string form that reports and plugins carry.
#include "attncheck/contract.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace attncheck {
inline namespace tolerance {

namespace {
constexpr Precision kAll[] = {Precision::fp64, Precision::fp32,     Precision::tf32,    Precision::fp16,
                              Precision::bf16, Precision::fp8_e4m3, Precision::fp8_e5m2};

bool is_fp8(Precision p) { return p == Precision::fp8_e4m3 || p == Precision::fp8_e5m2; }

Precision parse_field(const std::string& field, const std::string& value) {
  try {
    return precision_from_string(value);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("precision contract: field '" + field + "' has unknown precision '" + value +
                                "' (expected fp64, fp32, tf32, fp16, bf16, fp8_e4m3 or fp8_e5m2)");
  }
}
}  // namespace

const char* to_string(Precision p) {
  switch (p) {
    case Precision::fp64: return "fp64";
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
    case Precision::fp8_e4m3: return "fp8_e4m3";
    case Precision::fp8_e5m2: return "fp8_e5m2";
  }
  return "?";
}

const char* to_string(RopeMath r) {
  switch (r) {
    case RopeMath::exact: return "exact";
    case RopeMath::fp32: return "fp32-angles";
    case RopeMath::table_fp32: return "table-fp32";
    case RopeMath::table_fp16: return "table-fp16";
    case RopeMath::table_bf16: return "table-bf16";
  }
  return "?";
}

Precision precision_from_string(const std::string& s) {
  for (Precision p : kAll)
    if (s == to_string(p)) return p;
  throw std::invalid_argument("unknown precision '" + s +
                              "' (expected fp64, fp32, tf32, fp16, bf16, fp8_e4m3 or fp8_e5m2)");
}

double unit_roundoff(Precision p) {
  switch (p) {
    case Precision::fp64: return std::ldexp(1.0, -53);
    case Precision::fp32: return std::ldexp(1.0, -24);
    case Precision::tf32: return std::ldexp(1.0, -11);  // 10 stored mantissa bits, like fp16
    case Precision::fp16: return std::ldexp(1.0, -11);
    case Precision::bf16: return std::ldexp(1.0, -8);
    case Precision::fp8_e4m3: return std::ldexp(1.0, -4);
    case Precision::fp8_e5m2: return std::ldexp(1.0, -3);
  }
  return 0;
}

Precision precision_of(DType t) {
  switch (t) {
    case DType::f64: return Precision::fp64;
    case DType::f32: return Precision::fp32;
    case DType::f16: return Precision::fp16;
    case DType::bf16: return Precision::bf16;
    case DType::e4m3: return Precision::fp8_e4m3;
    case DType::e5m2: return Precision::fp8_e5m2;
    case DType::u8:
    case DType::i8:
    case DType::q4_0:
    case DType::q4_1: break;
  }
  throw std::invalid_argument(std::string("precision_of: dtype ") + to_string(t) + " is not a floating-point format");
}

PrecisionContract default_contract(DType dtype) {
  PrecisionContract c;
  const Precision in = precision_of(dtype);
  const Precision work = dtype == DType::f64 ? Precision::fp64 : Precision::fp32;
  c.qk_operands = in;
  c.pv_operands = in;
  c.scores = work;
  c.accumulate = work;
  c.p_rounded = dtype == DType::f16 || dtype == DType::bf16 || is_fp8(dtype);  // fp8: P in the input's format
  return c;
}

std::string PrecisionContract::to_string() const {
  std::ostringstream o;
  o << "qk=" << attncheck::to_string(qk_operands) << ",scores=" << attncheck::to_string(scores)
    << ",pv=" << attncheck::to_string(pv_operands) << ",acc=" << attncheck::to_string(accumulate)
    << ",p=" << (p_rounded ? "rounded" : "exact") << ",exp=" << (exp == ExpFlavour::exp2 ? "exp2" : "exp");
  if (rope != RopeMath::exact) o << ",rope=" << attncheck::to_string(rope);
  return o.str();
}

PrecisionContract contract_from_string(const std::string& s, DType dtype) {
  PrecisionContract c = default_contract(dtype);
  std::istringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("precision contract: '" + item + "' is not key=value (in '" + s + "')");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "qk")
      c.qk_operands = parse_field(key, value);
    else if (key == "scores")
      c.scores = parse_field(key, value);
    else if (key == "pv")
      c.pv_operands = parse_field(key, value);
    else if (key == "acc")
      c.accumulate = parse_field(key, value);
    else if (key == "p" && (value == "rounded" || value == "exact"))
      c.p_rounded = value == "rounded";
    else if (key == "exp" && (value == "exp" || value == "exp2"))
      c.exp = value == "exp2" ? ExpFlavour::exp2 : ExpFlavour::exp;
    else if (key == "rope") {
      bool found = false;
      for (RopeMath r :
           {RopeMath::exact, RopeMath::fp32, RopeMath::table_fp32, RopeMath::table_fp16, RopeMath::table_bf16})
        if (value == attncheck::to_string(r)) c.rope = r, found = true;
      if (!found)
        throw std::invalid_argument("precision contract: field 'rope' has unknown value '" + value +
                                    "' (expected exact, fp32-angles, table-fp32, table-fp16 or table-bf16)");
    } else if (key == "p" || key == "exp")
      throw std::invalid_argument("precision contract: field '" + key + "' has unknown value '" + value +
                                  "' (expected " + (key == "p" ? "rounded or exact)" : "exp or exp2)"));
    else
      throw std::invalid_argument("precision contract: unknown field '" + key +
                                  "' (expected qk, scores, pv, acc, p, exp, rope)");
  }
  validate_contract(c, dtype);
  return c;
}

void validate_contract(const PrecisionContract& c, DType dtype) {
  auto fail = [&](const char* field, Precision p, const std::string& why) {
    throw std::invalid_argument(std::string("precision contract for ") + to_string(dtype) + ": " + field + "=" +
                                to_string(p) + " " + why);
  };
  if (dtype == DType::f64) {
    const std::pair<const char*, Precision> fields[] = {
        {"qk", c.qk_operands}, {"scores", c.scores}, {"pv", c.pv_operands}, {"acc", c.accumulate}};
    for (const auto& [f, p] : fields)
      if (p != Precision::fp64) fail(f, p, "(fp64 problems are computed entirely in fp64)");
  }
  if (is_fp8(c.scores)) fail("scores", c.scores, "(fp8 is an operand format, not a score format)");
  if (is_fp8(c.accumulate)) fail("acc", c.accumulate, "(fp8 cannot accumulate)");
  if (c.accumulate == Precision::tf32) fail("acc", c.accumulate, "(tf32 is an operand format)");
  (void)precision_of(dtype);
}

}  // namespace tolerance
}  // namespace attncheck
