// Expressions as modifications (mods_expr.hpp): muparser (Debian's libmuparser-dev) parses and evaluates them in
// double. muparser has no indexing, so `name[i, j]` of a declared tensor is rewritten to the call `name(i, j)` of
// a function registered for that tensor: one character for one, so muparser's error positions are the user's.
// A compiled parser binds its variables by address and is not shareable between threads: each thread keeps its
// own, rebuilt when the problem's expression, declaration or values change (a few microseconds).
#include "mods_expr.hpp"

#include <muParser.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <memory>
#include <sstream>

#include "detail.hpp"

namespace attncheck::inline model::expr {

namespace {

using detail::fail;

const char* field_of(Which w) { return w == Which::score ? "score_expr" : "mask_expr"; }
const std::string& text_of(const Problem& p, Which w) { return w == Which::score ? p.score_expr : p.mask_expr; }

// The variables, in the order of Evaluator::var.
constexpr std::array<const char*, 6> kVars = {"score", "b", "h", "q_idx", "kv_idx", "q_pos"};

std::string g17(double x) {
  std::ostringstream o;
  o.precision(17);
  o << x;
  return o.str();
}
bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

struct Decl {
  std::string name;
  std::vector<int64_t> dims;
  size_t offset = 0, size = 1;
};

// "name[d0,d1];name2[d0]" -> declarations, checked against expr_values.
std::vector<Decl> parse_tensors(const Problem& p) {
  std::vector<Decl> out;
  const std::string& s = p.expr_tensors;
  auto bad = [&](const std::string& what) {
    fail("expr_tensors '" + s + "': " + what + " (expected name[d0,...];... with 1 to 4 extents >= 1)");
  };
  size_t i = 0, total = 0;
  while (i < s.size()) {
    Decl d;
    const size_t start = i;
    if (!ident_start(s[i])) bad("a name must start at position " + std::to_string(i));
    while (i < s.size() && ident_char(s[i])) ++i;
    d.name = s.substr(start, i - start);
    for (const char* v : kVars)
      if (d.name == v) bad("'" + d.name + "' is a variable of the expressions");
    for (const Decl& e : out)
      if (e.name == d.name) bad("'" + d.name + "' declared twice");
    if (i >= s.size() || s[i] != '[') bad("'[' expected at position " + std::to_string(i));
    do {
      ++i;
      size_t n = 0;
      int64_t v = 0;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && n < 10) v = v * 10 + (s[i++] - '0'), ++n;
      if (n == 0 || v < 1 || v > detail::kMaxElements) bad("an extent >= 1 expected at position " + std::to_string(i));
      d.dims.push_back(v);
      if (d.size > static_cast<size_t>(detail::kMaxElements) / static_cast<size_t>(v))
        bad("'" + d.name + "' is too large");
      d.size *= static_cast<size_t>(v);
    } while (i < s.size() && s[i] == ',');
    if (i >= s.size() || s[i] != ']') bad("']' expected at position " + std::to_string(i));
    if (d.dims.size() > 4) bad("'" + d.name + "' has rank " + std::to_string(d.dims.size()));
    ++i;
    d.offset = total, total += d.size;
    out.push_back(d);
    if (i < s.size() && s[i] != ';') bad("';' expected at position " + std::to_string(i));
    if (i < s.size()) ++i;
  }
  if (total != p.expr_values.size())
    fail("expr_values must have " + std::to_string(total) + " entries (the tensors of expr_tensors '" + s + "'), got " +
         std::to_string(p.expr_values.size()));
  for (size_t n = 0; n < p.expr_values.size(); ++n)
    if (!std::isfinite(p.expr_values[n]))
      fail("expr_values must be finite, got " + g17(p.expr_values[n]) + " at " + std::to_string(n));
  return out;
}

thread_local bool dry = false;    // while parsing: tensor calls return 0 (the point is not a real one)
thread_local bool sweep = false;  // while validation evaluates every point: the score there is not a real one

struct TensorRef {
  const double* values;
  std::vector<int64_t> dims;
  std::string name, where;  // where: "field 'expr'" and the positions where the tensor is indexed
};

double at(const TensorRef& t, std::initializer_list<double> idx) {
  if (dry) return 0.0;
  size_t off = 0, k = 0;
  for (const double x : idx) {
    const int64_t n = t.dims[k];
    if (!(x >= 0 && x < static_cast<double>(n) && x == std::floor(x)))
      throw std::invalid_argument(t.where + ": index " + g17(x) + " of " + t.name + " (dimension " + std::to_string(k) +
                                  ") is not an integer in [0, " + std::to_string(n) + ")");
    off = off * static_cast<size_t>(n) + static_cast<size_t>(x), ++k;
  }
  return t.values[off];
}
double at1(void* t, double a) { return at(*static_cast<TensorRef*>(t), {a}); }
double at2(void* t, double a, double b) { return at(*static_cast<TensorRef*>(t), {a, b}); }
double at3(void* t, double a, double b, double c) { return at(*static_cast<TensorRef*>(t), {a, b, c}); }
double at4(void* t, double a, double b, double c, double d) { return at(*static_cast<TensorRef*>(t), {a, b, c, d}); }
double floor1(double x) { return std::floor(x); }
double ceil1(double x) { return std::ceil(x); }
double mod2(double a, double b) { return std::fmod(a, b); }

// `name[` -> `name(` for declared tensors, `]` -> `)`; anything else about brackets is an error here, with its
// position, since muparser would only say "unexpected token".
std::string rewrite(const std::string& e, const std::vector<Decl>& tensors, const std::string& who) {
  std::string out = e;
  std::vector<std::pair<char, size_t>> open;
  auto is_tensor = [&](const std::string& n) {
    for (const Decl& d : tensors)
      if (d.name == n) return true;
    return false;
  };
  for (size_t i = 0; i < e.size(); ++i) {
    const char c = e[i];
    if (ident_start(c) && (i == 0 || !ident_char(e[i - 1]))) {  // a tensor name must be indexed
      size_t n = i;
      while (n < e.size() && ident_char(e[n])) ++n;
      size_t after = n;
      while (after < e.size() && e[after] == ' ') ++after;
      if (is_tensor(e.substr(i, n - i)) && (after >= e.size() || e[after] != '['))
        fail(who + ": tensor '" + e.substr(i, n - i) + "' at position " + std::to_string(i) +
             " must be indexed: " + e.substr(i, n - i) + "[...]");
    }
    if (c == '(') open.push_back({'(', i});
    if (c == '[') {
      size_t n = i;
      while (n > 0 && e[n - 1] == ' ') --n;
      size_t s = n;
      while (s > 0 && ident_char(e[s - 1])) --s;
      const std::string name = e.substr(s, n - s);
      if (!is_tensor(name)) {
        std::string known;
        for (const Decl& d : tensors) known += (known.empty() ? "" : ", ") + d.name;
        fail(who + ": '[' at position " + std::to_string(i) + " follows " +
             (name.empty() ? std::string("no name") : "'" + name + "', which is not an auxiliary tensor") +
             " (declared in expr_tensors: " + (known.empty() ? std::string("none") : known) + ")");
      }
      open.push_back({'[', i});
      out[i] = '(';
    }
    if (c == ']' || c == ')') {
      const char want = c == ']' ? '[' : '(';
      if (open.empty() || open.back().first != want)
        fail(who + ": '" + std::string(1, c) + "' at position " + std::to_string(i) +
             (open.empty() ? std::string(" closes nothing")
                           : " closes '" + std::string(1, open.back().first) + "' at position " +
                                 std::to_string(open.back().second)));
      open.pop_back();
      out[i] = ')';
    }
  }
  if (!open.empty())
    fail(who + ": '" + std::string(1, open.back().first) + "' at position " + std::to_string(open.back().second) +
         " is not closed");
  return out;
}

// One thread's compiled expression, valid while the problem's text, declaration and values are these.
struct Evaluator {
  std::string text, decl;
  const double* values = nullptr;
  size_t nvalues = 0;
  Which which = Which::score;
  std::string who;  // "score_expr 'EXPR'"
  mu::Parser parser;
  std::array<double, kVars.size()> var{};
  std::vector<std::unique_ptr<TensorRef>> refs;

  bool matches(const Problem& p, Which w) const {
    return which == w && values == p.expr_values.data() && nvalues == p.expr_values.size() && text == text_of(p, w) &&
           decl == p.expr_tensors;
  }

  Evaluator(const Problem& p, Which w)
      : text(text_of(p, w)),
        decl(p.expr_tensors),
        values(p.expr_values.data()),
        nvalues(p.expr_values.size()),
        which(w) {
    who = std::string(field_of(w)) + " '" + text + "'";
    if (text.find_first_not_of(' ') == std::string::npos) fail(who + ": empty expression");
    const std::vector<Decl> tensors = parse_tensors(p);
    const std::string code = rewrite(text, tensors, who);
    try {
      for (size_t n = 0; n < kVars.size(); ++n)
        if (n > 0 || w == Which::score) parser.DefineVar(kVars[n], &var[n]);  // a mask has no score
      parser.DefineFun("floor", floor1);
      parser.DefineFun("ceil", ceil1);
      parser.DefineFun("mod", mod2);
      for (const Decl& d : tensors) {
        std::string where;
        for (size_t i = text.find(d.name); i != std::string::npos; i = text.find(d.name, i + 1))
          if ((i == 0 || !ident_char(text[i - 1])) &&
              (i + d.name.size() >= text.size() || !ident_char(text[i + d.name.size()])))
            where += (where.empty() ? "" : ", ") + std::to_string(i);
        refs.push_back(std::make_unique<TensorRef>(
            TensorRef{values + d.offset, d.dims, d.name, who + " (" + d.name + "[ at position " + where + ")"}));
        void* u = refs.back().get();
        // No constant folding: a call is evaluated where it is reached, so its range check sees the real point.
        switch (d.dims.size()) {
          case 1: parser.DefineFunUserData(d.name, at1, u, false); break;
          case 2: parser.DefineFunUserData(d.name, at2, u, false); break;
          case 3: parser.DefineFunUserData(d.name, at3, u, false); break;
          default: parser.DefineFunUserData(d.name, at4, u, false); break;
        }
      }
      parser.SetExpr(code);
      // Parse now (muparser parses on the first Eval): every tensor call returns 0 while `dry`.
      dry = true;
      parser.Eval();
      dry = false;
      if (parser.GetNumResults() != 1)
        fail(who + ": one value expected, got " + std::to_string(parser.GetNumResults()) + " (a ',' outside brackets)");
    } catch (const mu::ParserError& e) {
      dry = false;
      const int pos = e.GetPos();
      fail(who + ": " + e.GetMsg() +
           (pos >= 0 && static_cast<size_t>(pos) < text.size()
                ? " ('" + text.substr(static_cast<size_t>(pos), 12) + "')"
                : ""));
    } catch (...) {
      dry = false;
      throw;
    }
  }

  double eval(const Problem& p, const ModAt& a, double s) {
    const int64_t* o = p.expr_origin.empty() ? nullptr : p.expr_origin.data();
    var[0] = s;
    var[1] = static_cast<double>(a.b + (o ? o[0] : 0));
    var[2] = static_cast<double>(a.h + (o ? o[1] : 0));
    var[3] = static_cast<double>(a.i + (o ? o[2] : 0));
    var[4] = static_cast<double>(a.j + (o ? o[3] : 0));
    var[5] = static_cast<double>(a.pos + (o ? o[3] : 0));
    try {
      return parser.Eval();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string(e.what()) + " at " + point());
    } catch (const mu::ParserError& e) {
      throw std::invalid_argument(who + ": " + e.GetMsg() + " at " + point());
    }
  }
  std::string point() const {
    return "b=" + g17(var[1]) + ", h=" + g17(var[2]) + ", q_idx=" + g17(var[3]) + ", kv_idx=" + g17(var[4]) +
           ", q_pos=" + g17(var[5]) + (which == Which::score && !sweep ? ", score=" + g17(var[0]) : std::string());
  }
};

// The calling thread's evaluator for p's expression w (a few kept, so alternating problems do not recompile).
Evaluator& evaluator(const Problem& p, Which w) {
  thread_local std::vector<std::unique_ptr<Evaluator>> cache;
  for (auto& e : cache)
    if (e->matches(p, w)) return *e;
  auto made = std::make_unique<Evaluator>(p, w);
  if (cache.size() >= 4) cache.erase(cache.begin());
  cache.push_back(std::move(made));
  return *cache.back();
}

}  // namespace

double score(const Problem& p, const ModAt& a, double s) { return evaluator(p, Which::score).eval(p, a, s); }

double dscore(const Problem& p, const ModAt& a, double s) {
  Evaluator& e = evaluator(p, Which::score);
  const double h = std::ldexp(std::max(1.0, std::abs(s)), -12);
  const double fm2 = e.eval(p, a, s - 2 * h), fm1 = e.eval(p, a, s - h), fp1 = e.eval(p, a, s + h),
               fp2 = e.eval(p, a, s + 2 * h), f = e.eval(p, a, s);
  const double d = (-fp2 + 8 * fp1 - 8 * fm1 + fm2) / (12 * h);  // central, fourth order
  const double right = (-3 * f + 4 * fp1 - fp2) / (2 * h), left = (3 * f - 4 * fm1 + fm2) / (2 * h);  // one-sided
  const double limit = 1e-6 * std::max({1.0, std::abs(d), std::abs(f) / std::max(1.0, std::abs(s))});
  if (!std::isfinite(d) || !(std::abs(right - left) <= limit))
    fail(e.who + ": not differentiable in score at " + e.point() + " (one-sided differences " + g17(left) + " and " +
         g17(right) + " at step " + g17(h) +
         "): the backward needs d score_expr / d score, and a kink or jump has none");
  return d;
}

bool visible(const Problem& p, const ModAt& a) {
  Evaluator& e = evaluator(p, Which::mask);
  const double r = e.eval(p, a, 0.0);
  if (!std::isfinite(r)) fail(e.who + ": non-finite result " + g17(r) + " at " + e.point());
  return r != 0.0;
}

void check(const Problem& p, Which w) {
  if (!p.expr_origin.empty()) {
    if (p.expr_origin.size() != 4)
      fail("expr_origin must have 4 entries [b, h, q_idx, kv_idx], got " + shape_string(p.expr_origin));
    for (int64_t v : p.expr_origin)
      if (v < 0 || v > detail::kMaxElements)
        fail("expr_origin must be in [0, 2^60], got " + shape_string(p.expr_origin));
  }
  evaluator(p, w);  // compiles: syntax, names, declaration
  if (double(p.B) * double(p.Hq) * double(p.Lq) * double(p.Lk) > double(kSweepLimit)) return;
  struct Sweep {
    Sweep() { sweep = true; }
    ~Sweep() { sweep = false; }
  } during;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t j = 0; j < p.Lk; ++j) {
          const ModAt a{b, h, i, i + p.diagonal_offset(b), j};
          if (w == Which::mask)
            visible(p, a);
          else
            score(p, a, 0.0);  // the indices (the score's finiteness depends on the inputs)
        }
}

}  // namespace attncheck::inline model::expr
