// `attncheck import TENSORS.npz|.h5 --out CASE.h5 [--causal bottom-right --scale S --softcap C --policy P ...]`:
// a fixture from a user's own tensors (q, k, v, optional mask, bias, keep, and past_key/past_value for a KV-cache
// append: k, v are then the new tokens and the fixture also expects present = concat(past, new)). The problem comes
// from the arrays' shapes and dtype plus the flags; the reference computes the expected outputs; `verify` replays the
// result.
// `--judge`: the file also holds a candidate's outputs (out [, lse, weights]), judged as `compare` judges them, with
// or without a fixture written: one step and no file, the Python package's route for a single check. TENSORS `-`
// reads an .npz from stdin.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "attncheck/candidate_arrays.hpp"
#include "attncheck/durable_file.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/user_arrays.hpp"
#include "candidate_rows.hpp"
#include "command.hpp"
#include "compare.hpp"
#include "module_import.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  std::string input, out, report, tolerances, name, dtype, layout = "bhsd", causal, policy = "zero", fill_value,
                                                           scores_out, max_logit;
  std::string score_mod, mask_mod;  // user modifications (expressions) and the arrays they index
  std::vector<std::string> aux;
  std::optional<double> scale;
  double softcap = 0, dropout_p = 0, descale_q = 1, descale_k = 1, descale_v = 1;
  std::optional<int64_t> causal_offset;
  std::vector<int64_t> window, key_lengths;
  uint64_t dropout_seed = 0;
  bool want_lse = false, want_weights = false, judge = false;
  ModuleImportFlags module;  // --module: a module fixture from x, weights and flags (cmd_module_import.cpp)
  bool is_module = false;
};
Options g;

// A little-endian float64 .npy file (numpy's format, version 1.0): what `--tolerances DIR` writes.
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<double>& v) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string h = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + dims + "), }";
  h.append(63 - (10 + h.size()) % 64, ' ');
  h += '\n';
  std::string bytes("\x93NUMPY\x01", 7);
  bytes += '\0';
  bytes += static_cast<char>(h.size() & 255);
  bytes += static_cast<char>(h.size() >> 8);
  bytes += h;
  bytes.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
  write_file_durably(path, bytes);
}

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

// Every byte of stdin, refused past max_bytes (like a file of that size).
std::string read_stdin(uint64_t max_bytes) {
  std::string bytes;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
    bytes.append(buf, n);
    if (bytes.size() > max_bytes)
      bad("stdin: more than " + std::to_string(max_bytes) + " bytes (the --max-bytes budget)");
  }
  return bytes;
}

DType dtype_of(const UserArray& a, const std::string& name) {
  if (a.dtype == "float16") return DType::f16;
  if (a.dtype == "float32") return DType::f32;
  if (a.dtype == "float64") return DType::f64;
  bad(g.input + ": " + name + ": dtype " + a.dtype +
      " is not a tensor dtype (float16, float32, float64; bf16: pass uint16 bit "
      "patterns with --dtype bf16; fp8: uint8 codes with --dtype fp8_e4m3 or fp8_e5m2)");
}

// A rank-4 tensor in storage order `order` from a C-order array whose dims are the stored (memory-order) ones.
// `codes`: the array holds t's bit patterns (bf16 as uint16, fp8 as uint8), decoded exactly.
Tensor to_tensor(const UserArray& a, DType t, const std::vector<int64_t>& logical, Layout l, bool codes) {
  Tensor out(t, logical, storage_order(l));
  for (size_t n = 0; n < a.values.size(); ++n) {
    double x = a.values[n];
    if (codes) x = is_fp8(t) ? fp8_bits_to_double(uint8_t(x), t) : double(bf16_bits_to_float(uint16_t(x)));
    out.set_offset(int64_t(n), x);
  }
  return out;
}

// Mask/bias: numpy broadcasting to [B, Hq, Lq, Lk] (missing leading dims are 1).
std::array<int64_t, 4> broadcast_shape(const UserArray& a, const std::string& name) {
  if (a.shape.empty() || a.shape.size() > 4)
    bad(g.input + ": " + name + ": rank must be 1 to 4, got shape " + shape_string(a.shape));
  std::array<int64_t, 4> s{1, 1, 1, 1};
  std::copy(a.shape.begin(), a.shape.end(), s.begin() + (4 - long(a.shape.size())));
  return s;
}

int run_import() {
  if (g.is_module) {
    if (g.judge || !g.report.empty())
      bad("--judge: not for --module (a module's outputs are judged by compare-module)");
    if (g.out.empty()) bad("--out: needed (the module fixture to write)");
    ModuleImportFlags f = g.module;
    f.input = g.input, f.out = g.out, f.name = g.name, f.dtype = g.dtype, f.causal = g.causal, f.scale = g.scale;
    f.policy = g.policy, f.dropout_p = g.dropout_p, f.dropout_seed = g.dropout_seed, f.want_weights = g.want_weights;
    return import_module(f);
  }
  if (g.out.empty() && !g.judge)
    bad("--out: needed (the fixture to write), unless --judge judges the file's own outputs");
  if (!g.out.empty() && std::filesystem::path(g.out).extension() != ".h5")
    bad("--out: must name a .h5 file, got '" + g.out + "'");
  if (!g.report.empty() && !g.judge) bad("--report: only with --judge (a report of the judged outputs)");
  if (!g.report.empty()) check_report_path(g.report);
  const bool from_stdin = g.input == "-";
  std::map<std::string, UserArray> members;  // every member of an .npz read from stdin (its outputs too)
  if (from_stdin) {
    g.input = "stdin";
    members = parse_npz(read_stdin(budget().max_bytes), g.input, budget().max_bytes);
  }
  std::map<std::string, UserArray> arrays =
      from_stdin ? select_user_arrays(members, g.aux) : read_user_arrays(g.input, budget().max_bytes, g.aux);
  for (const char* n : {"q", "k", "v"})
    if (!arrays.count(n))
      bad(g.input + ": no array named '" + n + "' (need q, k, v; optional mask, bias, keep, past_key, past_value)");
  const UserArray &q = arrays["q"], &k = arrays["k"], &v = arrays["v"];
  for (const auto* a : {&q, &k, &v})
    if (a->shape.size() != 4)
      bad(g.input + ": q, k, v must have rank 4, got q " + shape_string(q.shape) + ", k " + shape_string(k.shape) +
          ", v " + shape_string(v.shape));
  if (q.dtype != k.dtype || q.dtype != v.dtype)
    bad(g.input + ": q, k, v must share a dtype, got " + q.dtype + ", " + k.dtype + ", " + v.dtype);

  Problem p;
  p.layout = layout_from_string(g.layout == "bhsd" ? "BHSD" : g.layout == "bshd" ? "BSHD" : g.layout);
  const bool bshd = p.layout == Layout::BSHD;
  p.dtype = g.dtype.empty() ? dtype_of(q, "q") : dtype_from_string(g.dtype);
  // Bit patterns: bf16 as uint16, fp8 (e4m3, e5m2) as uint8, as torch's .view(torch.uint8) gives them.
  const bool codes = (p.dtype == DType::bf16 && q.dtype == "uint16") || (is_fp8(p.dtype) && q.dtype == "uint8");
  p.descale_q = g.descale_q, p.descale_k = g.descale_k, p.descale_v = g.descale_v;
  if (!codes && dtype_of(q, "q") != p.dtype)
    std::printf("note: q, k, v (%s) are rounded to --dtype %s\n", q.dtype.c_str(), g.dtype.c_str());
  auto dim = [&](const UserArray& a, int logical) {
    return a.shape[size_t(bshd && (logical == 1 || logical == 2) ? 3 - logical : logical)];
  };
  p.B = dim(q, 0), p.Hq = dim(q, 1), p.Lq = dim(q, 2), p.Dqk = dim(q, 3);
  p.Hkv = dim(k, 1), p.Lk = dim(k, 2), p.Dv = dim(v, 3);
  if (dim(k, 0) != p.B || dim(v, 0) != p.B || dim(k, 3) != p.Dqk || dim(v, 1) != p.Hkv || dim(v, 2) != p.Lk)
    bad(g.input + ": shapes do not agree (" + g.layout + "): q " + shape_string(q.shape) + ", k " +
        shape_string(k.shape) + ", v " + shape_string(v.shape));
  // A KV-cache append: past_key/past_value [B,Hkv,P,D] in the same layout; Lk is the present length P + new.
  const auto pk = arrays.find("past_key"), pv = arrays.find("past_value");
  if ((pk == arrays.end()) != (pv == arrays.end()))
    bad(g.input + ": past_key and past_value come together (found only " +
        (pk != arrays.end() ? "past_key" : "past_value") + ")");
  if (pk != arrays.end()) {
    const UserArray &a = pk->second, &b = pv->second;
    if (a.shape.size() != 4 || b.shape.size() != 4 || a.dtype != q.dtype || b.dtype != q.dtype || dim(a, 0) != p.B ||
        dim(a, 1) != p.Hkv || dim(a, 3) != p.Dqk || dim(b, 0) != p.B || dim(b, 1) != p.Hkv || dim(b, 2) != dim(a, 2) ||
        dim(b, 3) != p.Dv)
      bad(g.input + ": past_key " + a.dtype + shape_string(a.shape) + ", past_value " + b.dtype +
          shape_string(b.shape) + " must be [B,Hkv,P,Dqk] and [B,Hkv,P,Dv] (" + g.layout + ") in q's dtype " + q.dtype +
          ", with k " + shape_string(k.shape));
    p.past_len = dim(a, 2);
    p.Lk += p.past_len;
  }
  p.scale = g.scale;
  p.softcap = g.softcap;
  if (!g.causal.empty()) {
    std::string a = g.causal;
    std::replace(a.begin(), a.end(), '-', '_');
    p.causal = true;
    p.alignment = alignment_from_string(a);
  }
  if (g.causal_offset) p.alignment = Alignment::explicit_, p.causal_offset = *g.causal_offset;
  if (!g.window.empty()) {
    if (g.window.size() != 2) bad("--window: expected LEFT,RIGHT (-1 = unbounded)");
    p.window_left = g.window[0], p.window_right = g.window[1];
  }
  p.key_lengths = g.key_lengths;
  p.fully_masked = fully_masked_from_string(g.policy);
  if (!g.fill_value.empty()) p.fill = MaskFill::finite, p.fill_value = std::stod(g.fill_value);
  p.dropout_p = g.dropout_p, p.dropout_seed = g.dropout_seed;
  p.want_lse = g.want_lse, p.want_weights = g.want_weights;
  if (!g.scores_out.empty()) {
    try {
      p.scores_out = scores_out_from_string(g.scores_out);
    } catch (const std::exception&) {
      bad("--scores-out: unknown value '" + g.scores_out + "' (expected scaled, capped, masked)");
    }
  }
  if (!g.max_logit.empty()) {
    if (g.max_logit != "rows" && g.max_logit != "heads")
      bad("--max-logit: unknown value '" + g.max_logit + "' (expected rows, heads)");
    p.max_logit = max_logit_from_string(g.max_logit);
  }

  p.score_expr = g.score_mod, p.mask_expr = g.mask_mod;
  for (const std::string& n : g.aux) {  // auxiliary tensors: declared in order, values concatenated row-major
    const auto it = arrays.find(n);
    static const char* const kReserved[] = {"q", "k", "v", "mask", "bias", "keep", "past_key", "past_value"};
    if (std::find(std::begin(kReserved), std::end(kReserved), n) != std::end(kReserved))
      bad("--aux " + n + ": '" + n + "' is an attention input, not an auxiliary tensor");
    if (it == arrays.end()) bad("--aux " + n + ": no array named '" + n + "' in " + g.input);
    const UserArray& a = it->second;
    if (a.shape.empty() || a.shape.size() > 4)
      bad("--aux " + n + ": rank must be 1 to 4, got shape " + shape_string(a.shape) + " (" + g.input + ")");
    std::string dims;
    for (int64_t d : a.shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    p.expr_tensors += (p.expr_tensors.empty() ? "" : ";") + n + "[" + dims + "]";
    p.expr_values.insert(p.expr_values.end(), a.values.begin(), a.values.end());
  }

  Inputs in;
  in.q = to_tensor(q, p.dtype, {p.B, p.Hq, p.Lq, p.Dqk}, p.layout, codes);
  in.k = to_tensor(k, p.dtype, {p.B, p.Hkv, p.new_len(), p.Dqk}, p.layout, codes);
  in.v = to_tensor(v, p.dtype, {p.B, p.Hkv, p.new_len(), p.Dv}, p.layout, codes);
  if (p.past_len > 0) {
    in.past_k = to_tensor(pk->second, p.dtype, {p.B, p.Hkv, p.past_len, p.Dqk}, p.layout, codes);
    in.past_v = to_tensor(pv->second, p.dtype, {p.B, p.Hkv, p.past_len, p.Dv}, p.layout, codes);
  }
  if (auto it = arrays.find("mask"); it != arrays.end()) {
    check_zero_one(g.input + ": mask", it->second);
    p.mask_shape = broadcast_shape(it->second, "mask");
    in.mask = to_tensor(it->second, DType::u8, {p.mask_shape->begin(), p.mask_shape->end()}, Layout::BHSD, false);
  }
  if (auto it = arrays.find("bias"); it != arrays.end()) {
    p.bias_shape = broadcast_shape(it->second, "bias");
    p.bias_dtype = it->second.dtype == "float16" ? DType::f16 : it->second.dtype == "float64" ? DType::f64 : DType::f32;
    if (!it->second.is_float()) bad(g.input + ": bias: dtype " + it->second.dtype + " must be a float type");
    in.bias = to_tensor(it->second, p.bias_dtype, {p.bias_shape->begin(), p.bias_shape->end()}, Layout::BHSD, false);
  }
  if (auto it = arrays.find("keep"); it != arrays.end()) {
    check_zero_one(g.input + ": keep", it->second);
    if (!(p.dropout_p > 0)) bad(g.input + ": keep: a dropout keep-mask needs --dropout-p P > 0");
    const std::vector<int64_t> full{p.B, p.Hq, p.Lq, p.Lk};  // keep is not broadcast
    if (it->second.shape != full)
      bad(g.input + ": keep: shape must be [B,Hq,Lq,Lk]=" + shape_string(full) + ", got " +
          shape_string(it->second.shape));
    in.keep = to_tensor(it->second, DType::u8, it->second.shape, Layout::BHSD, false);
  } else if (p.dropout_p > 0) {
    bad("--dropout-p " + std::to_string(p.dropout_p) + ": needs a keep array in " + g.input);
  }
  // The problem is this file's arrays with the flags: its errors (a mask or bias not broadcastable, GQA heads,
  // key_lengths beyond Lk) name the file as well as the field.
  try {
    validate(p, in);
  } catch (const std::invalid_argument& e) {
    bad(g.input + ": " + e.what());
  }
  check_work(p, false, budget().max_flops);  // before the reference runs
  Provenance prov;
  prov.distribution = "user";
  prov.command = "attncheck import " + std::filesystem::path(g.input).filename().string();
  const std::string name = g.name.empty() ? p.name() + "/imported" : g.name;
  const Outputs candidate = !g.judge     ? Outputs{}
                            : from_stdin ? candidate_from_arrays(std::move(members), g.input, p)
                                         : read_candidate(g.input, p);
  const Fixture f = make_fixture(name, p, std::move(in), prov);
  if (!g.out.empty()) write_fixture(g.out, f);
  if (!g.tolerances.empty()) {  // per-element bounds for outputs in the problem dtype (row-major, logical order)
    std::filesystem::create_directories(g.tolerances);
    write_npy(g.tolerances + "/out.npy", {p.B, p.Hq, p.Lq, p.Dv}, out_tolerance(p, f.expected, f.tolerance));
    write_npy(g.tolerances + "/lse.npy", {p.B, p.Hq, p.Lq}, lse_tolerance(p, f.expected, f.tolerance));
    if (p.want_weights)
      write_npy(g.tolerances + "/weights.npy", {p.B, p.Hq, p.Lq, p.Lk}, weights_tolerance(p, f.expected, f.tolerance));
    if (p.max_logit != MaxLogitOut::none) {  // in the output's form: a head's bound is its rows' largest
      std::vector<double> t = max_logit_tolerance(p, f.expected, f.tolerance);
      write_npy(g.tolerances + "/max_logit.npy", max_logit_shape(p),
                p.max_logit == MaxLogitOut::heads ? max_logit_heads(p, t) : t);
    }
  }
  if (!g.out.empty())
    std::printf("imported %s -> %s (%s)\nreplay: attncheck verify --fixtures %s --impl NAME\n", g.input.c_str(),
                g.out.c_str(), name.c_str(), std::filesystem::path(g.out).parent_path().string().c_str());
  if (!g.judge) return 0;
  verify::CandidateJudging judged;
  std::vector<CaseResult> rows{
      verify::judge_candidate_outputs(f, g.out.empty() ? g.input : g.out, g.input, g.input, candidate, "", judged,
                                      [](const std::string& n) { std::printf("note: %s\n", n.c_str()); })};
  describe_problem(rows[0], f.problem);
  print_rows(rows, {});
  if (!g.report.empty()) write_report(g.report, rows);
  return exit_code(rows);
}

const Register reg{
    {"import",
     "Make a fixture from your own tensors (.npz or .h5 with q, k, v [, mask, bias, keep, past_key, past_value])",
     [](CLI::App& sub) {
       sub.add_option("input", g.input,
                      "Tensors: .npz (np.savez[_compressed]) or .h5 (h5py); - reads an "
                      ".npz from stdin")
           ->required();
       sub.add_option("--out", g.out, "Fixture to write (.h5); optional with --judge");
       sub.add_flag("--judge", g.judge,
                    "Judge the file's own outputs (out [, lse, weights]; an .h5's "
                    "/actual/out ...) against the reference, as compare does: exit 0 pass, 1 fail");
       sub.add_option("--report", g.report, "With --judge: write a report, FILE.json or FILE.xml (JUnit)");
       sub.add_option("--tolerances", g.tolerances,
                      "Also write the per-element tolerances as DIR/out.npy, "
                      "lse.npy [, weights.npy, max_logit.npy] (logical [B,H,L,...] order)");
       sub.add_option("--name", g.name, "Case name (default: from the problem)");
       sub.add_option("--dtype", g.dtype,
                      "Problem dtype (default: q's; bf16 from uint16 bit patterns, "
                      "fp8_e4m3/fp8_e5m2 from uint8 codes)");
       sub.add_option("--descale-q", g.descale_q, "fp8: q's values are descale_q * code (default 1)");
       sub.add_option("--descale-k", g.descale_k, "fp8: k's (and past_key's) descale (default 1)");
       sub.add_option("--descale-v", g.descale_v, "fp8: v's (and past_value's) descale (default 1)");
       sub.add_option("--layout", g.layout, "Memory order of q, k, v: bhsd or bshd")->capture_default_str();
       sub.add_option("--causal", g.causal, "Causal mask aligned top-left or bottom-right");
       sub.add_option("--causal-offset", g.causal_offset, "Causal/window diagonal offset (explicit)");
       sub.add_option("--scale", g.scale, "Softmax scale (default 1/sqrt(Dqk))");
       sub.add_option("--softcap", g.softcap, "Logit softcap c (0 = off)");
       sub.add_option("--window", g.window, "Sliding window LEFT,RIGHT")->delimiter(',');
       sub.add_option("--key-lengths", g.key_lengths, "Valid keys per batch")->delimiter(',');
       sub.add_option("--policy", g.policy, "Fully-masked rows: zero, nan, uniform")->capture_default_str();
       sub.add_option("--fill-value", g.fill_value, "Masked scores become this finite value (default -inf)");
       sub.add_option("--dropout-p", g.dropout_p, "Dropout probability of the keep array");
       sub.add_option("--dropout-seed", g.dropout_seed, "Recorded with the keep array");
       sub.add_option("--score-mod", g.score_mod,
                      "Score modification: an expression over score, b, h, q_idx, "
                      "kv_idx, q_pos and --aux tensors, e.g. 'score + slopes[h] * (kv_idx - q_pos)' "
                      "(docs/problem-model.md \"Expressions\")");
       sub.add_option("--mask-mod", g.mask_mod,
                      "Mask modification: an expression over b, h, q_idx, kv_idx, q_pos "
                      "and --aux tensors, nonzero = visible, e.g. 'doc[b, q_idx] == doc[b, kv_idx]'");
       sub.add_option("--aux", g.aux, "Arrays of the input file that the expressions index, by name")->delimiter(',');
       sub.add_flag("--want-lse", g.want_lse, "Ask implementations for lse");
       sub.add_flag("--want-weights", g.want_weights, "Ask for (and store) the attention weights");
       sub.add_option("--scores-out", g.scores_out,
                      "Also expect the raw scores [B,Hq,Lq,Lk]: scaled, capped "
                      "(after softcap) or masked (the softmax input); ONNX qk_matmul_output_mode 0, 1, 2");
       sub.add_option("--max-logit", g.max_logit,
                      "Also expect the max-logit output: rows [B,Hq,Lq] or "
                      "heads [Hq] (the row max of the softmax input; TransformerEngine's return_max_logit)");
       sub.add_flag("--module", g.is_module,
                    "A module fixture from x [, x2], weights and flags "
                    "(docs/module.md): needs --heads");
       sub.add_option("--heads", g.module.heads, "--module: query heads");
       sub.add_option("--kv-heads", g.module.kv_heads, "--module: KV heads (default: --heads)");
       sub.add_option("--packing", g.module.packing, "--module: packed (default) or interleaved, for wqkv");
       sub.add_flag("--average-weights", g.module.average_weights, "--module: weights averaged over heads");
       return std::function<int()>(run_import);
     }}};

}  // namespace
}  // namespace attncheck::cli
