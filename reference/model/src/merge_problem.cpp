// A merge problem (docs/states.md): the conventions states are stored in, states in fp64, and stored states.
#include "attncheck/merge_problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "attncheck/kv_cache.hpp"

namespace attncheck {
inline namespace model {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLog2e = 1.4426950408889634073599246810018921;

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw std::invalid_argument("merge problem: field '" + field + "': " + what);
}

double empty_stat(const StateConventions& c) { return empty_stat_value(c); }

double to_nats(const StateConventions& c, double stored) { return c.base == LseBase::two ? stored / kLog2e : stored; }

// Index helpers: an input stat is [N,B,H,L] (n >= 0), an output stat [B,H,L] (n < 0); rows are (b·H + h)·L + i.
void set_stat(Tensor& t, const MergeProblem& p, int64_t n, int64_t r, double x) {
  const int64_t i = r % p.L, h = (r / p.L) % p.H, b = r / (p.L * p.H);
  const int64_t in[4] = {n, b, h, i}, out[3] = {b, h, i};
  n >= 0 ? t.set(in, x) : t.set(out, x);
}
void set_o(Tensor& t, const MergeProblem& p, int64_t n, int64_t r, int64_t d, double x) {
  if (n >= 0)
    t.set_offset(t.offset(std::vector<int64_t>{n, r / (p.L * p.H), (r / p.L) % p.H, r % p.L, d}.data()), x);
  else
    t.set_offset(t.offset(std::vector<int64_t>{r / (p.L * p.H), (r / p.L) % p.H, r % p.L, d}.data()), x);
}

}  // namespace

std::string shortest_text(double x) {
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x || std::isnan(x)) break;
  }
  return buf;
}

double stored_stat(const Tensor& t, const MergeProblem& p, int64_t n, int64_t r) {
  const int64_t i = r % p.L, h = (r / p.L) % p.H, b = r / (p.L * p.H);
  const int64_t in[4] = {n, b, h, i}, out[3] = {b, h, i};
  return n >= 0 ? t.get(in) : t.get(out);
}
double stored_o(const Tensor& t, const MergeProblem& p, int64_t n, int64_t r, int64_t d) {
  return n >= 0 ? t.get_offset(t.offset(std::vector<int64_t>{n, r / (p.L * p.H), (r / p.L) % p.H, r % p.L, d}.data()))
                : t.get_offset(t.offset(std::vector<int64_t>{r / (p.L * p.H), (r / p.L) % p.H, r % p.L, d}.data()));
}

double to_stored_units(const StateConventions& c, double nats) { return c.base == LseBase::two ? nats * kLog2e : nats; }

double empty_stat_value(const StateConventions& c) {
  switch (c.empty_lse) {
    case EmptyLse::neg_inf: return -kInf;
    case EmptyLse::pos_inf: return kInf;
    case EmptyLse::finite: return round_to(DType::f32, c.sentinel);  // stats are stored in fp32
  }
  return -kInf;
}

double merged_o_to_stored(const StateConventions& c, double o) {
  if (!c.out_dtype) return o;
  const double top = kv_code_max(*c.out_dtype), x = o / c.out_scale;
  return x > top ? top : x < -top ? -top : x;  // NaN stays NaN
}
double merged_o_from_stored(const StateConventions& c, double stored) {
  return c.out_dtype ? stored * c.out_scale : stored;
}

// ---- conventions -------------------------------------------------------------------------------------------------
std::string StateConventions::text() const {
  std::string s = form == StateForm::normalised ? "normalised" : "unnormalised";
  s += std::string(",base=") + (base == LseBase::e ? "e" : "2");
  s += ",empty=" + (empty_lse == EmptyLse::neg_inf   ? std::string("-inf")
                    : empty_lse == EmptyLse::pos_inf ? std::string("+inf")
                                                     : shortest_text(sentinel));
  s += std::string(",out=") + (empty_out == EmptyOut::zero ? "zero" : "undefined");
  s += std::string(",layout=") + (layout == StatLayout::bhl ? "bhl" : "blh");
  if (o_layout == OutLayout::blhd) s += ",olayout=blhd";  // the default is left out: older texts stay as they were
  if (out_dtype) s += std::string(",odtype=") + to_string(*out_dtype) + ",oscale=" + shortest_text(out_scale);
  return s;
}

StateConventions parse_conventions(const std::string& text) {
  StateConventions c;
  std::stringstream ss(text);
  std::string tok;
  bool first = true, scale_given = false;
  while (std::getline(ss, tok, ',')) {
    if (first) {
      first = false;
      if (tok == "normalised")
        c.form = StateForm::normalised;
      else if (tok == "unnormalised")
        c.form = StateForm::unnormalised;
      else
        bad("conventions", "form must be normalised or unnormalised, got '" + tok + "' in '" + text + "'");
      continue;
    }
    const auto eq = tok.find('=');
    const std::string k = tok.substr(0, eq), v = eq == std::string::npos ? "" : tok.substr(eq + 1);
    if (k == "base" && (v == "e" || v == "2"))
      c.base = v == "e" ? LseBase::e : LseBase::two;
    else if (k == "empty" && v == "-inf")
      c.empty_lse = EmptyLse::neg_inf;
    else if (k == "empty" && v == "+inf")
      c.empty_lse = EmptyLse::pos_inf;
    else if (k == "empty") {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !std::isfinite(x))
        bad("conventions", "empty must be -inf, +inf or a finite number, got '" + v + "'");
      c.empty_lse = EmptyLse::finite, c.sentinel = x;
    } else if (k == "out" && (v == "zero" || v == "undefined"))
      c.empty_out = v == "zero" ? EmptyOut::zero : EmptyOut::undefined;
    else if (k == "layout" && (v == "bhl" || v == "blh"))
      c.layout = v == "bhl" ? StatLayout::bhl : StatLayout::blh;
    else if (k == "olayout" && (v == "bhld" || v == "blhd"))
      c.o_layout = v == "bhld" ? OutLayout::bhld : OutLayout::blhd;
    else if (k == "odtype" && (v == "fp8_e4m3" || v == "fp8_e5m2"))
      c.out_dtype = v == "fp8_e4m3" ? DType::e4m3 : DType::e5m2;
    else if (k == "oscale") {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !std::isfinite(x) || !(x > 0))
        bad("conventions", "oscale must be a positive finite number, got '" + v + "'");
      c.out_scale = x, scale_given = true;
    } else
      bad("conventions",
          "unknown or malformed entry '" + tok + "' in '" + text +
              "' (base=e|2, empty=-inf|+inf|<number>, out=zero|undefined, layout=bhl|blh, olayout=bhld|blhd, "
              "odtype=fp8_e4m3|fp8_e5m2, oscale=<number>)");
  }
  if (first) bad("conventions", "empty text");
  if (c.out_dtype.has_value() != scale_given)
    bad("conventions", "odtype and oscale go together (an fp8 output needs its scale), got '" + text + "'");
  if (c.out_dtype && c.form != StateForm::normalised)
    bad("conventions", "an fp8 output (odtype) needs the normalised form, got '" + text + "'");
  return c;
}

// ---- states in fp64 ------------------------------------------------------------------------------------------------
double State::lse(int64_t r) const { return empty(r) ? -kInf : m[r] + std::log(l[r]); }
double State::out(int64_t r, int64_t d) const { return empty(r) ? 0.0 : u[r * D + d] / l[r]; }

State empty_state(int64_t B, int64_t H, int64_t L, int64_t D) {
  State s{B, H, L, D, {}, {}, {}};
  s.m.assign(static_cast<size_t>(B * H * L), -kInf);
  s.l.assign(static_cast<size_t>(B * H * L), 0.0);
  s.u.assign(static_cast<size_t>(B * H * L * D), 0.0);
  return s;
}

// ---- stored states -------------------------------------------------------------------------------------------------
void validate(const MergeProblem& p) {
  auto range = [](const char* f, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
      bad(f, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v));
  };
  range("N", p.N, 1, 1024), range("B", p.B, 1, 1 << 16), range("H", p.H, 1, 1024), range("L", p.L, 1, 1 << 20);
  range("D", p.D, 1, 1024);
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    bad("dtype", std::string("must be fp32, fp16 or bf16, got ") + to_string(p.dtype));
  if (p.conv.empty_lse == EmptyLse::finite && !std::isfinite(p.conv.sentinel))
    bad("conventions.empty", "a finite sentinel must be finite, got " + shortest_text(p.conv.sentinel));
  if (static_cast<double>(p.N * p.B * p.H * p.L * p.D) > 2e8) bad("N*B*H*L*D", "more than 2e8 elements");
  if (const auto& t = p.conv.out_dtype) {
    if (*t != DType::e4m3 && *t != DType::e5m2)
      bad("conventions.odtype", std::string("must be fp8_e4m3 or fp8_e5m2, got ") + to_string(*t));
    if (!(p.conv.out_scale > 0) || !std::isfinite(p.conv.out_scale))
      bad("conventions.oscale", "must be a positive finite number, got " + shortest_text(p.conv.out_scale));
    if (p.conv.form != StateForm::normalised) bad("conventions.odtype", "an fp8 output needs the normalised form");
  }
}

namespace {
Tensor stat_tensor(const MergeProblem& p, bool stacked) {
  const bool blh = p.conv.layout == StatLayout::blh;
  if (stacked) return Tensor(DType::f32, {p.N, p.B, p.H, p.L}, blh ? std::vector<int>{0, 1, 3, 2} : std::vector<int>{});
  return Tensor(DType::f32, {p.B, p.H, p.L}, blh ? std::vector<int>{0, 2, 1} : std::vector<int>{});
}
StoredStates make_stored(const MergeProblem& p, bool stacked) {
  validate(p);
  StoredStates s;
  const bool tokens = p.conv.o_layout == OutLayout::blhd;  // O token-major: [N,B,L,H,D] in memory
  s.o = stacked
            ? Tensor(p.dtype, {p.N, p.B, p.H, p.L, p.D}, tokens ? std::vector<int>{0, 1, 3, 2, 4} : std::vector<int>{})
            : Tensor(p.conv.out_dtype.value_or(p.dtype), {p.B, p.H, p.L, p.D},
                     tokens ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{});
  if (p.conv.form == StateForm::normalised)
    s.lse = stat_tensor(p, stacked);
  else
    s.max = stat_tensor(p, stacked), s.sum = stat_tensor(p, stacked);
  return s;
}
}  // namespace

StoredStates make_merge_inputs(const MergeProblem& p) { return make_stored(p, true); }
StoredStates make_merge_outputs(const MergeProblem& p) { return make_stored(p, false); }

StoredStates encode_states(const MergeProblem& p, const std::vector<State>& states, bool poison_empty_out) {
  if (static_cast<int64_t>(states.size()) != p.N)
    bad("N", std::to_string(p.N) + " declared, " + std::to_string(states.size()) + " states given");
  if (poison_empty_out && p.conv.empty_out != EmptyOut::undefined)
    bad("conventions.out", "NaN in an empty state's O needs out=undefined");
  StoredStates st = make_merge_inputs(p);
  const bool norm = p.conv.form == StateForm::normalised;
  for (int64_t n = 0; n < p.N; ++n) {
    const State& s = states[static_cast<size_t>(n)];
    if (s.B != p.B || s.H != p.H || s.L != p.L || s.D != p.D)
      bad("states", "state " + std::to_string(n) + " has another shape");
    for (int64_t r = 0; r < s.rows(); ++r) {
      const bool e = s.empty(r);
      if (norm)
        set_stat(*st.lse, p, n, r, e ? empty_stat(p.conv) : to_stored_units(p.conv, s.lse(r)));
      else {
        set_stat(*st.max, p, n, r, e ? empty_stat(p.conv) : to_stored_units(p.conv, s.m[r]));
        set_stat(*st.sum, p, n, r, s.l[r]);
      }
      for (int64_t d = 0; d < p.D; ++d)
        set_o(st.o, p, n, r, d, e ? (poison_empty_out ? std::nan("") : 0.0) : norm ? s.out(r, d) : s.u[r * p.D + d]);
    }
  }
  return st;
}

State decode_state(const MergeProblem& p, const StoredStates& in, int64_t n) {
  State s = empty_state(p.B, p.H, p.L, p.D);
  const double sentinel = empty_stat(p.conv);
  const bool norm = p.conv.form == StateForm::normalised;
  for (int64_t r = 0; r < s.rows(); ++r) {
    const double x = stored_stat(norm ? *in.lse : *in.max, p, n, r);
    const double l = norm ? 1.0 : stored_stat(*in.sum, p, n, r);
    if (x == sentinel || l == 0) continue;  // empty by the declared sentinel: its O is never read
    s.m[r] = to_nats(p.conv, x), s.l[r] = l;
    for (int64_t d = 0; d < p.D; ++d) s.u[r * p.D + d] = stored_o(in.o, p, n, r, d);
  }
  return s;
}

}  // namespace model
}  // namespace attncheck
