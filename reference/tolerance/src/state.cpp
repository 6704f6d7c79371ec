// Attention states (docs/states.md): partial attention over a key range and the merge, both in fp64 loops, the
// conventions states are stored in, and the derived per-element bound a candidate's merged state is judged by.
#include "attncheck/state.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "attncheck/dtype_floor.hpp"
#include "attncheck/kv_cache.hpp"

namespace attncheck {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLog2e = 1.4426950408889634073599246810018921;

// The shortest %g text that reads back as x (names and the conventions' text stay short and lossless).
std::string g17(double x) {
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x || std::isnan(x)) break;
  }
  return buf;
}

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw std::invalid_argument("merge problem: field '" + field + "': " + what);
}

double empty_stat(const StateConventions& c) { return empty_stat_value(c); }

double to_stored_units(const StateConventions& c, double nats) { return c.base == LseBase::two ? nats * kLog2e : nats; }
double to_nats(const StateConventions& c, double stored) { return c.base == LseBase::two ? stored / kLog2e : stored; }

// Index helpers: an input stat is [N,B,H,L] (n >= 0), an output stat [B,H,L] (n < 0); rows are (b·H + h)·L + i.
double get_stat(const Tensor& t, const MergeProblem& p, int64_t n, int64_t r) {
  const int64_t i = r % p.L, h = (r / p.L) % p.H, b = r / (p.L * p.H);
  const int64_t in[4] = {n, b, h, i}, out[3] = {b, h, i};
  return n >= 0 ? t.get(in) : t.get(out);
}
void set_stat(Tensor& t, const MergeProblem& p, int64_t n, int64_t r, double x) {
  const int64_t i = r % p.L, h = (r / p.L) % p.H, b = r / (p.L * p.H);
  const int64_t in[4] = {n, b, h, i}, out[3] = {b, h, i};
  n >= 0 ? t.set(in, x) : t.set(out, x);
}
double get_o(const Tensor& t, const MergeProblem& p, int64_t n, int64_t r, int64_t d) {
  return n >= 0 ? t.get_offset(t.offset(std::vector<int64_t>{n, r / (p.L * p.H), (r / p.L) % p.H, r % p.L, d}.data()))
                : t.get_offset(t.offset(std::vector<int64_t>{r / (p.L * p.H), (r / p.L) % p.H, r % p.L, d}.data()));
}
void set_o(Tensor& t, const MergeProblem& p, int64_t n, int64_t r, int64_t d, double x) {
  if (n >= 0)
    t.set_offset(t.offset(std::vector<int64_t>{n, r / (p.L * p.H), (r / p.L) % p.H, r % p.L, d}.data()), x);
  else
    t.set_offset(t.offset(std::vector<int64_t>{r / (p.L * p.H), (r / p.L) % p.H, r % p.L, d}.data()), x);
}

std::string row_index(const MergeProblem& p, int64_t r) {
  return std::to_string(r / (p.L * p.H)) + "," + std::to_string((r / p.L) % p.H) + "," + std::to_string(r % p.L);
}

}  // namespace

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
                                                     : g17(sentinel));
  s += std::string(",out=") + (empty_out == EmptyOut::zero ? "zero" : "undefined");
  s += std::string(",layout=") + (layout == StatLayout::bhl ? "bhl" : "blh");
  if (o_layout == OutLayout::blhd) s += ",olayout=blhd";  // the default is left out: older texts stay as they were
  if (out_dtype) s += std::string(",odtype=") + to_string(*out_dtype) + ",oscale=" + g17(out_scale);
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

State partial_state(const PartialSpec& s, const Tensor& q, const Tensor& k, const Tensor& v,
                    const std::vector<int64_t>& begin, const std::vector<int64_t>& end) {
  if (s.Hkv < 1 || s.Hq % s.Hkv != 0) bad("Hq", "must be a multiple of Hkv");
  State st = empty_state(s.B, s.Hq, s.Lq, s.D);
  const int64_t group = s.Hq / s.Hkv;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t j0 = begin.size() == 1 ? begin[0] : begin.at(static_cast<size_t>(b));
    const int64_t j1 = end.size() == 1 ? end[0] : end.at(static_cast<size_t>(b));
    if (j0 < 0 || j1 > s.Lk || j0 > j1) {
      std::string range = "[";
      range += std::to_string(j0) + ", " + std::to_string(j1) + ") outside [0, Lk]";
      bad("key range", range);
    }
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t hk = h / group;  // GQA: query head h reads KV head h / (Hq / Hkv)
      for (int64_t i = 0; i < s.Lq; ++i) {
        const int64_t r = (b * s.Hq + h) * s.Lq + i;
        std::vector<double> score;  // the visible keys of the range, in order
        std::vector<int64_t> key;
        for (int64_t j = j0; j < j1; ++j) {
          if (s.causal && j > i + s.Lk - s.Lq) continue;  // bottom-right causal: masked, skipped explicitly
          double dot = 0;
          for (int64_t d = 0; d < s.D; ++d) dot += q.at(b, h, i, d) * k.at(b, hk, j, d);
          score.push_back(dot * s.scale), key.push_back(j);
        }
        if (score.empty()) continue;  // an empty state: l = 0, m = -inf, u = 0
        const double m = *std::max_element(score.begin(), score.end());
        double l = 0;
        for (size_t t = 0; t < score.size(); ++t) {
          const double w = std::exp(score[t] - m);
          l += w;
          for (int64_t d = 0; d < s.D; ++d) st.u[r * s.D + d] += w * v.at(b, hk, key[t], d);
        }
        st.m[r] = m, st.l[r] = l;
      }
    }
  }
  return st;
}

State merge_states(const std::vector<State>& states) {
  if (states.empty()) bad("N", "a merge needs at least one state");
  const State& f = states[0];
  State out = empty_state(f.B, f.H, f.L, f.D);
  for (const State& s : states)
    if (s.B != f.B || s.H != f.H || s.L != f.L || s.D != f.D) bad("states", "states of different shapes");
  for (int64_t r = 0; r < f.rows(); ++r) {
    double m = -kInf;
    for (const State& s : states)
      if (!s.empty(r)) m = std::max(m, s.m[r]);
    if (m == -kInf) continue;  // every state empty: the merge is empty
    for (const State& s : states) {
      if (s.empty(r)) continue;  // contributes nothing, whatever its u holds
      const double w = std::exp(s.m[r] - m);
      out.l[r] += w * s.l[r];
      for (int64_t d = 0; d < f.D; ++d) out.u[r * f.D + d] += w * s.u[r * f.D + d];
    }
    out.m[r] = m;
  }
  return out;
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
    bad("conventions.empty", "a finite sentinel must be finite, got " + g17(p.conv.sentinel));
  if (static_cast<double>(p.N * p.B * p.H * p.L * p.D) > 2e8) bad("N*B*H*L*D", "more than 2e8 elements");
  if (const auto& t = p.conv.out_dtype) {
    if (*t != DType::e4m3 && *t != DType::e5m2)
      bad("conventions.odtype", std::string("must be fp8_e4m3 or fp8_e5m2, got ") + to_string(*t));
    if (!(p.conv.out_scale > 0) || !std::isfinite(p.conv.out_scale))
      bad("conventions.oscale", "must be a positive finite number, got " + g17(p.conv.out_scale));
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
    const double x = get_stat(norm ? *in.lse : *in.max, p, n, r);
    const double l = norm ? 1.0 : get_stat(*in.sum, p, n, r);
    if (x == sentinel || l == 0) continue;  // empty by the declared sentinel: its O is never read
    s.m[r] = to_nats(p.conv, x), s.l[r] = l;
    for (int64_t d = 0; d < p.D; ++d) s.u[r * p.D + d] = get_o(in.o, p, n, r, d);
  }
  return s;
}

MergeExpected reference_merge(const MergeProblem& p, const StoredStates& in) {
  std::vector<State> states;
  for (int64_t n = 0; n < p.N; ++n) states.push_back(decode_state(p, in, n));
  return {merge_states(states)};
}

std::vector<double> merged_exponent(const MergeProblem& p, const StoredStates& in) {
  const bool norm = p.conv.form == StateForm::normalised;
  const double sentinel = empty_stat(p.conv);
  std::vector<double> x(static_cast<size_t>(p.B * p.H * p.L), sentinel);
  for (int64_t r = 0; r < p.B * p.H * p.L; ++r) {
    bool any = false;
    for (int64_t n = 0; n < p.N; ++n) {
      const double v = get_stat(norm ? *in.lse : *in.max, p, n, r);
      if (v == sentinel || (!norm && get_stat(*in.sum, p, n, r) == 0)) continue;
      x[static_cast<size_t>(r)] = any ? std::max(x[static_cast<size_t>(r)], v) : v;
      any = true;
    }
  }
  return x;
}

// ---- judgement (docs/states.md, "Tolerance of a merged result") -----------------------------------------------------
MergeVerdict judge_merge(const MergeProblem& p, const StoredStates& in, const StoredStates& out) {
  const MergeExpected ex = reference_merge(p, in);
  const State& M = ex.merged;
  const bool norm = p.conv.form == StateForm::normalised;
  const DType odt = p.conv.out_dtype.value_or(p.dtype);
  const double u32 = std::ldexp(1.0, -24), uo = unit_roundoff(odt), N = static_cast<double>(p.N);
  const double ln_b = p.conv.base == LseBase::two ? std::log(2.0) : 1.0;  // d(ln w) per unit of stored exponent
  // Rounding O into its dtype: half a unit relative, or half the subnormal step (fp16 O of tiny values); an fp8 O
  // rounds O / out_scale, so both are in units of the scale. The error of the division itself (one fp32 unit) is
  // within the factor 2 below.
  const double os = p.conv.out_dtype ? p.conv.out_scale : 1.0;
  const auto round_o = [&](double o) { return std::max(uo * std::fabs(o), 0.5 * denorm_min(odt) * os); };
  // The merged O read back from the output (an fp8 element times its scale) and the O the reference expects there
  // (saturated at the fp8 format's largest value, as stored).
  const auto got_o = [&](int64_t r, int64_t d) { return merged_o_from_stored(p.conv, get_o(out.o, p, -1, r, d)); };
  const auto want_o = [&](double o) { return merged_o_from_stored(p.conv, merged_o_to_stored(p.conv, o)); };
  std::vector<State> ins;
  for (int64_t n = 0; n < p.N; ++n) ins.push_back(decode_state(p, in, n));
  MergeVerdict v;
  auto check = [&](int64_t r, const std::string& what, double expect, double got, double tol) {
    ++v.checked;
    const double err = std::fabs(got - expect);
    const bool ok = got == expect || err <= tol;  // equal infinities pass; NaN never does
    const double ratio = ok ? (tol > 0 ? err / tol : 0) : (std::isfinite(err) && tol > 0 ? err / tol : kInf);
    if (!ok) {
      ++v.failed, v.pass = false;
      if (v.bad_rows.empty() || v.bad_rows.back() != r) v.bad_rows.push_back(r);
    }
    if (!ok && (ratio > v.worst_ratio || v.worst.empty())) {
      v.worst_ratio = ratio;
      v.worst = what + ": expected " + g17(expect) + ", got " + g17(got) + ", |err| " + g17(err) + " > tol " + g17(tol);
    }
  };
  const double sentinel = empty_stat(p.conv);
  const std::vector<double> mx = merged_exponent(p, in);
  for (int64_t r = 0; r < M.rows(); ++r) {
    std::string at = "[";
    at += row_index(p, r);
    if (M.empty(r)) {  // the merged state is the empty state, bit for bit
      check(r, std::string(norm ? "lse" : "max") + at + "]", sentinel, get_stat(norm ? *out.lse : *out.max, p, -1, r),
            0);
      if (!norm) check(r, "sum" + at + "]", 0.0, get_stat(*out.sum, p, -1, r), 0);
      if (p.conv.empty_out == EmptyOut::zero)
        for (int64_t d = 0; d < p.D; ++d) check(r, "o" + at + "," + std::to_string(d) + "]", 0.0, got_o(r, d), 0);
      continue;
    }
    // Per non-empty input i: x_i its stored exponent, w_i = b^(x_i - X) its weight, E_i the relative error of the
    // weight as fp32 computes it (difference, a base conversion of either operand, exp: 3 units).
    const double X = mx[static_cast<size_t>(r)];
    double S = 0, SE = 0;
    std::vector<double> w(static_cast<size_t>(p.N), 0.0), E(static_cast<size_t>(p.N), 0.0);
    for (int64_t n = 0; n < p.N; ++n) {
      const State& s = ins[static_cast<size_t>(n)];
      if (s.empty(r)) continue;
      const double x = get_stat(norm ? *in.lse : *in.max, p, n, r);
      w[n] = std::exp(s.m[r] - M.m[r]) * s.l[r];  // the state's share of the merged denominator
      E[n] = u32 * (std::fabs(x - X) + std::fabs(x) + std::fabs(X) + 3.0) * ln_b + (N + 1) * u32;
      S += w[n], SE += w[n] * E[n];
    }
    const double relS = SE / S + N * u32;  // relative error of the merged denominator
    if (norm) {
      const double lse = to_stored_units(p.conv, M.lse(r));
      check(r, "lse" + at + "]", lse, get_stat(*out.lse, p, -1, r),
            2 * (u32 * (std::fabs(lse) + std::fabs(X) + 2.0) + relS / ln_b));
    } else {
      check(r, "max" + at + "]", X, get_stat(*out.max, p, -1, r), 0);  // a max of fp32 values is exact
      check(r, "sum" + at + "]", M.l[r], get_stat(*out.sum, p, -1, r), 2 * (u32 * M.l[r] + SE));
    }
    for (int64_t d = 0; d < p.D; ++d) {
      double spread = 0;  // Σ_i share_i · E_i · |O_i| (normalised) or Σ_i r_i E_i |u_i| (unnormalised)
      for (int64_t n = 0; n < p.N; ++n) {
        const State& s = ins[static_cast<size_t>(n)];
        if (s.empty(r)) continue;
        const double mag = std::fabs(s.u[r * p.D + d]) / s.l[r];  // |O_i|
        spread += w[n] * E[n] * mag;
      }
      const std::string name = "o" + at + "," + std::to_string(d) + "]";
      if (norm) {
        const double o = M.out(r, d);
        check(r, name, want_o(o), got_o(r, d), 2 * (round_o(o) + spread / S + relS * std::fabs(o)));
      } else {
        const double o = M.u[r * p.D + d];  // u_i = O_i·l_i: w_i already holds e^(m_i - m)·l_i
        check(r, name, o, get_o(out.o, p, -1, r, d), 2 * (round_o(o) + spread));
      }
    }
  }
  return v;
}

}  // namespace attncheck
