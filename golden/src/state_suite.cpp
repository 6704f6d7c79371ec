// Builds the merge suite's fixtures from golden/suite-states.json (format in docs/states.md "Fixtures"): q, k, v
// drawn with the shared generator's Rng and rounded to the dtype, partial states by the fp64 reference over the
// declared key ranges, or states drawn directly (lse offsets of 1e4, empties by pattern) for the hostile values.
#include "attncheck/state_suite.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "attncheck/rng.hpp"

namespace attncheck {

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& file, const std::string& where, const std::string& what) {
  throw std::invalid_argument(file + ": " + where + ": " + what);
}

json load(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument(path + ": cannot open the merge suite spec");
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    throw std::invalid_argument(path + ": not JSON: " + e.what());
  }
}

Tensor drawn(DType t, std::vector<int64_t> shape, Rng& rng) {
  Tensor x(t, std::move(shape));
  for (int64_t i = 0; i < x.numel(); ++i) x.set_offset(i, rng.normal());  // rounded to the dtype by set
  return x;
}

std::string conv_code(const StateConventions& c) {
  std::string s = c.form == StateForm::normalised ? "norm" : "unnorm";
  s += c.base == LseBase::e ? "-e" : "-2";
  s += c.empty_lse == EmptyLse::neg_inf ? "-ninf" : c.empty_lse == EmptyLse::pos_inf ? "-pinf" : "-finite";
  s += c.empty_out == EmptyOut::zero ? "-zero" : "-undef";
  s += c.layout == StatLayout::bhl ? "-bhl" : "-blh";
  if (c.o_layout == OutLayout::blhd) s += "-oblhd";
  return s;
}

// One case: its states and problem, from the merged defaults + case fields `c`.
MergeFixture build_one(const std::string& file, const std::string& where, const json& c) {
  auto num = [&](const char* k) -> int64_t {
    if (!c.contains(k) || !c[k].is_number_integer())
      fail(file, where, std::string("field '") + k + "': expected an integer");
    return c[k].get<int64_t>();
  };
  auto ints = [&](const json& v, const char* k) {
    if (!v.is_array()) fail(file, where, std::string("field '") + k + "': expected a list of integers");
    std::vector<int64_t> out;
    for (const auto& x : v) {
      if (!x.is_number_integer()) fail(file, where, std::string("field '") + k + "': expected a list of integers");
      out.push_back(x.get<int64_t>());
    }
    return out;
  };
  auto str = [&](const char* k, const std::string& def) { return c.contains(k) ? c[k].get<std::string>() : def; };
  MergeFixture f;
  MergeProblem& p = f.problem;
  try {
    p.dtype = dtype_from_string(str("dtype", "fp32"));
    p.conv = parse_conventions(str("conventions", "normalised,base=e,empty=-inf,out=zero,layout=bhl"));
  } catch (const std::invalid_argument& e) {
    fail(file, where, e.what());
  }
  f.source = str("source", "");
  f.description = str("description", "");
  f.seed = c.contains("seed") ? c["seed"].get<uint64_t>() : 1;
  const bool poison = c.contains("poison_empty_out") && c["poison_empty_out"].get<bool>();
  Rng rng(f.seed);
  std::vector<State> states;
  if (f.source == "split" || f.source == "cascade" || f.source == "chunked") {
    PartialSpec s;
    s.B = num("B"), s.Hq = num("Hq"), s.Hkv = num("Hkv"), s.D = num("D");
    std::vector<std::vector<int64_t>> cuts;  // per batch row: the key ranges' boundaries
    if (f.source == "split") {
      s.Lq = num("Lq"), s.causal = c.contains("causal") && c["causal"].get<bool>();
      if (c.contains("cuts_per_batch"))
        for (const auto& v : c["cuts_per_batch"]) cuts.push_back(ints(v, "cuts_per_batch"));
      else
        cuts.assign(static_cast<size_t>(s.B), ints(c.value("cuts", json()), "cuts"));
    } else if (f.source == "cascade") {  // a shared prefix [0, P), then request b's own suffix [P, P + suffix[b])
      s.Lq = 1;
      const int64_t P = num("prefix");
      const std::vector<int64_t> suffix = ints(c.value("suffix", json()), "suffix");
      if (static_cast<int64_t>(suffix.size()) != s.B) fail(file, where, "field 'suffix': one length per request (B)");
      for (int64_t b = 0; b < s.B; ++b) cuts.push_back({0, P, P + suffix[static_cast<size_t>(b)]});
    } else {  // chunked prefill: the past cache [0, past), then the chunk itself, causal
      const int64_t past = num("past"), chunk = num("chunk");
      s.Lq = chunk, s.causal = true;
      cuts.assign(static_cast<size_t>(s.B), {0, past, past + chunk});
    }
    if (cuts.size() != static_cast<size_t>(s.B) || cuts[0].size() < 2)
      fail(file, where, "cuts: one list of >= 2 boundaries per batch row");
    s.Lk = 0;
    for (const auto& v : cuts) {
      if (v.size() != cuts[0].size()) fail(file, where, "cuts: every batch row needs the same number of ranges");
      for (size_t k = 0; k + 1 < v.size(); ++k)
        if (v[k] > v[k + 1] || v[0] != 0) fail(file, where, "cuts: boundaries must start at 0 and not decrease");
      s.Lk = std::max(s.Lk, v.back());
    }
    s.scale = c.contains("scale") ? c["scale"].get<double>() : 1.0 / std::sqrt(static_cast<double>(s.D));
    if (s.Lk < 1) fail(file, where, "no keys at all");
    const Tensor q = drawn(p.dtype, {s.B, s.Hq, s.Lq, s.D}, rng);
    Tensor k = drawn(p.dtype, {s.B, s.Hkv, s.Lk, s.D}, rng), v = drawn(p.dtype, {s.B, s.Hkv, s.Lk, s.D}, rng);
    if (f.source == "cascade")  // the prefix is shared: every request sees request 0's prefix keys and values
      for (int64_t b = 1; b < s.B; ++b)
        for (int64_t h = 0; h < s.Hkv; ++h)
          for (int64_t j = 0; j < cuts[0][1]; ++j)
            for (int64_t d = 0; d < s.D; ++d) k.put(b, h, j, d, k.at(0, h, j, d)), v.put(b, h, j, d, v.at(0, h, j, d));
    for (size_t r = 0; r + 1 < cuts[0].size(); ++r) {
      std::vector<int64_t> begin, end;
      for (const auto& cb : cuts) begin.push_back(cb[r]), end.push_back(cb[r + 1]);
      states.push_back(partial_state(s, q, k, v, begin, end));
    }
    p.N = static_cast<int64_t>(states.size()), p.B = s.B, p.H = s.Hq, p.L = s.Lq, p.D = s.D;
  } else if (f.source == "varlen") {
    // Packed sequences of unequal lengths (varlen): sequence q has seqlens[q] query tokens and its own keys, cut at
    // cuts_per_seq[q] (bottom-right causal within the sequence when `causal`). The merge problem has one batch row
    // whose L rows are the total tokens, so [B,L,H] stats are [total_tokens, H] and [B,L,H,D] outputs [T, H, D].
    const std::vector<int64_t> lens = ints(c.value("seqlens", json()), "seqlens");
    std::vector<std::vector<int64_t>> cuts;
    for (const auto& v : c.value("cuts_per_seq", json::array())) cuts.push_back(ints(v, "cuts_per_seq"));
    if (lens.empty() || cuts.size() != lens.size())
      fail(file, where, "fields 'seqlens', 'cuts_per_seq': one list of key boundaries per sequence");
    PartialSpec s;
    s.B = 1, s.Hq = num("Hq"), s.Hkv = num("Hkv"), s.D = num("D"),
    s.causal = c.contains("causal") && c["causal"].get<bool>();
    s.scale = c.contains("scale") ? c["scale"].get<double>() : 1.0 / std::sqrt(static_cast<double>(s.D));
    int64_t T = 0;
    for (size_t q = 0; q < lens.size(); ++q) {
      const auto& v = cuts[q];
      if (lens[q] < 1) fail(file, where, "field 'seqlens': every sequence needs at least one token");
      if (v.size() != cuts[0].size() || v.size() < 2 || v[0] != 0 || v.back() < 1)
        fail(file, where, "cuts_per_seq: the same number (>= 2) of boundaries per sequence, from 0, at least one key");
      for (size_t k = 0; k + 1 < v.size(); ++k)
        if (v[k] > v[k + 1]) fail(file, where, "cuts_per_seq: boundaries must not decrease");
      T += lens[q];
    }
    states.assign(cuts[0].size() - 1, empty_state(1, s.Hq, T, s.D));
    for (size_t q = 0, t0 = 0; q < lens.size(); t0 += static_cast<size_t>(lens[q]), ++q) {
      s.Lq = lens[q], s.Lk = cuts[q].back();
      const Tensor qt = drawn(p.dtype, {1, s.Hq, s.Lq, s.D}, rng);
      const Tensor k = drawn(p.dtype, {1, s.Hkv, s.Lk, s.D}, rng), v = drawn(p.dtype, {1, s.Hkv, s.Lk, s.D}, rng);
      for (size_t r = 0; r < states.size(); ++r) {
        const State part = partial_state(s, qt, k, v, {cuts[q][r]}, {cuts[q][r + 1]});
        for (int64_t h = 0; h < s.Hq; ++h)
          for (int64_t i = 0; i < s.Lq; ++i) {  // row (h, i) of the sequence is row (h, t0 + i) of the packed state
            const int64_t from = h * s.Lq + i, to = h * T + static_cast<int64_t>(t0) + i;
            State& dst = states[r];
            dst.m[static_cast<size_t>(to)] = part.m[static_cast<size_t>(from)],
            dst.l[static_cast<size_t>(to)] = part.l[static_cast<size_t>(from)];
            for (int64_t d = 0; d < s.D; ++d)
              dst.u[static_cast<size_t>(to * s.D + d)] = part.u[static_cast<size_t>(from * s.D + d)];
          }
      }
    }
    p.N = static_cast<int64_t>(states.size()), p.B = 1, p.H = s.Hq, p.L = T, p.D = s.D;
  } else if (f.source == "states") {  // drawn directly: O in [-1, 1), lse = offset[n] + spread·normal
    p.N = num("N"), p.B = num("B"), p.H = num("H"), p.L = num("L"), p.D = num("D");
    const std::vector<double> offsets =
        c.contains("lse_offsets") ? c["lse_offsets"].get<std::vector<double>>() : std::vector<double>{0.0};
    const double spread = c.value("lse_spread", 1.0);
    const std::string empty = str("empty", "none");
    if (empty != "none" && empty != "all" && empty != "first" && empty != "mixed")
      fail(file, where, "field 'empty': expected none, all, first or mixed, got '" + empty + "'");
    for (int64_t n = 0; n < p.N; ++n) {
      State s = empty_state(p.B, p.H, p.L, p.D);
      for (int64_t r = 0; r < s.rows(); ++r) {
        // mixed: rows cycle through "state k alone empty" (k < N), "all empty" and "none empty"
        const int64_t cls = r % (p.N + 2);
        const bool e = empty == "all" || (empty == "first" && n == 0) || (empty == "mixed" && (cls == n || cls == p.N));
        const double m = offsets[static_cast<size_t>(n) % offsets.size()] + spread * rng.normal();
        const double l = p.conv.form == StateForm::unnormalised ? 1.0 + 20.0 * rng.uniform() : 1.0;
        std::vector<double> o(static_cast<size_t>(p.D));
        for (double& x : o) x = rng.uniform_signed();
        if (e) continue;
        s.m[r] = m, s.l[r] = l;
        for (int64_t d = 0; d < p.D; ++d) s.u[r * p.D + d] = o[static_cast<size_t>(d)] * l;
      }
      states.push_back(std::move(s));
    }
  } else {
    fail(file, where, "field 'source': expected split, cascade, chunked, varlen or states, got '" + f.source + "'");
  }
  const std::string tag = str("tag", f.source);
  p.name = "merge/" + std::string(to_string(p.dtype)) + "/N" + std::to_string(p.N) + "-B" + std::to_string(p.B) + "-H" +
           std::to_string(p.H) + "-L" + std::to_string(p.L) + "-D" + std::to_string(p.D) + "/" + conv_code(p.conv) +
           "/" + tag;
  try {
    validate(p);
    f.inputs = encode_states(p, states, poison);
  } catch (const std::invalid_argument& e) {
    fail(file, where, e.what());
  }
  f.command =
      "attncheck generate --spec " + std::filesystem::path(file).filename().string();  // same bytes from any directory
  return f;
}

}  // namespace

bool is_merge_suite(const std::string& path) {
  // Anything that is not a readable JSON object of kind "merge" is left to the attention suite's reader, which names
  // what is wrong with it (a directory, a missing file, bad JSON).
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  try {
    std::ifstream f(path);
    const json j = json::parse(f, nullptr, false);
    return j.is_object() && j.contains("kind") && j["kind"] == "merge";
  } catch (const std::exception&) {
    return false;
  }
}

MergeSuite build_merge_suite(const std::string& path) {
  const json j = load(path);
  MergeSuite s;
  s.file_name = path;
  s.subdir = j.value("subdir", std::string("states"));
  const json defaults = j.value("defaults", json::object());
  if (!j.contains("cases") || !j["cases"].is_array()) fail(path, "cases", "expected a list");
  for (size_t i = 0; i < j["cases"].size(); ++i) {
    const json& raw = j["cases"][i];
    if (raw.size() == 1 && raw.contains("comment")) continue;
    json c = defaults;
    for (auto it = raw.begin(); it != raw.end(); ++it) c[it.key()] = it.value();
    const json dtypes = c.value("dtype", json("fp32"));
    for (const auto& t : dtypes.is_array() ? dtypes : json::array({dtypes})) {
      json one = c;
      one["dtype"] = t;
      const std::string where = "cases[" + std::to_string(i) + "]";
      try {
        s.cases.push_back(build_one(path, where, one));
      } catch (const json::exception& e) {
        fail(path, where, e.what());
      }
    }
  }
  return s;
}

}  // namespace attncheck
