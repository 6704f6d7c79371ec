// `attncheck import`'s reading of a user's tensors into a fixture (see user_import.hpp).
#include "attncheck/user_import.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "attncheck/candidate_arrays.hpp"
#include "attncheck/durable_file.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/user_arrays.hpp"

namespace attncheck {
namespace {

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

DType dtype_of(const UserArray& a, const std::string& name, const std::string& src) {
  if (a.dtype == "float16") return DType::f16;
  if (a.dtype == "float32") return DType::f32;
  if (a.dtype == "float64") return DType::f64;
  bad(src + ": " + name + ": dtype " + a.dtype +
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
std::array<int64_t, 4> broadcast_shape(const UserArray& a, const std::string& name, const std::string& src) {
  if (a.shape.empty() || a.shape.size() > 4)
    bad(src + ": " + name + ": rank must be 1 to 4, got shape " + shape_string(a.shape));
  std::array<int64_t, 4> s{1, 1, 1, 1};
  std::copy(a.shape.begin(), a.shape.end(), s.begin() + (4 - long(a.shape.size())));
  return s;
}

}  // namespace

void check_import_request(const ImportRequest& r) {
  if (r.out.empty() && !r.judge)
    bad("--out: needed (the fixture to write), unless --judge judges the file's own outputs");
  if (!r.out.empty() && std::filesystem::path(r.out).extension() != ".h5")
    bad("--out: must name a .h5 file, got '" + r.out + "'");
}

ImportedCase import_case(const ImportRequest& r, const std::function<void(const std::string&)>& note) {
  check_import_request(r);
  const bool from_stdin = r.input == "-";
  std::map<std::string, UserArray> members;  // every member of an .npz read from stdin (its outputs too)
  const std::string src = from_stdin ? "stdin" : r.input;
  if (from_stdin) members = parse_npz(read_stdin(budget().max_bytes), src, budget().max_bytes);
  std::map<std::string, UserArray> arrays =
      from_stdin ? select_user_arrays(members, r.aux) : read_user_arrays(src, budget().max_bytes, r.aux);
  for (const char* n : {"q", "k", "v"})
    if (!arrays.count(n))
      bad(src + ": no array named '" + n + "' (need q, k, v; optional mask, bias, keep, past_key, past_value)");
  const UserArray &q = arrays["q"], &k = arrays["k"], &v = arrays["v"];
  for (const auto* a : {&q, &k, &v})
    if (a->shape.size() != 4)
      bad(src + ": q, k, v must have rank 4, got q " + shape_string(q.shape) + ", k " + shape_string(k.shape) + ", v " +
          shape_string(v.shape));
  if (q.dtype != k.dtype || q.dtype != v.dtype)
    bad(src + ": q, k, v must share a dtype, got " + q.dtype + ", " + k.dtype + ", " + v.dtype);

  Problem p;
  p.layout = layout_from_string(r.layout == "bhsd" ? "BHSD" : r.layout == "bshd" ? "BSHD" : r.layout);
  const bool bshd = p.layout == Layout::BSHD;
  p.dtype = r.dtype.empty() ? dtype_of(q, "q", src) : dtype_from_string(r.dtype);
  // Bit patterns: bf16 as uint16, fp8 (e4m3, e5m2) as uint8, as torch's .view(torch.uint8) gives them.
  const bool codes = (p.dtype == DType::bf16 && q.dtype == "uint16") || (is_fp8(p.dtype) && q.dtype == "uint8");
  p.descale_q = r.descale_q, p.descale_k = r.descale_k, p.descale_v = r.descale_v;
  if (!codes && dtype_of(q, "q", src) != p.dtype) note("q, k, v (" + q.dtype + ") are rounded to --dtype " + r.dtype);
  auto dim = [&](const UserArray& a, int logical) {
    return a.shape[size_t(bshd && (logical == 1 || logical == 2) ? 3 - logical : logical)];
  };
  p.B = dim(q, 0), p.Hq = dim(q, 1), p.Lq = dim(q, 2), p.Dqk = dim(q, 3);
  p.Hkv = dim(k, 1), p.Lk = dim(k, 2), p.Dv = dim(v, 3);
  if (dim(k, 0) != p.B || dim(v, 0) != p.B || dim(k, 3) != p.Dqk || dim(v, 1) != p.Hkv || dim(v, 2) != p.Lk)
    bad(src + ": shapes do not agree (" + r.layout + "): q " + shape_string(q.shape) + ", k " + shape_string(k.shape) +
        ", v " + shape_string(v.shape));
  // A KV-cache append: past_key/past_value [B,Hkv,P,D] in the same layout; Lk is the present length P + new.
  const auto pk = arrays.find("past_key"), pv = arrays.find("past_value");
  if ((pk == arrays.end()) != (pv == arrays.end()))
    bad(src + ": past_key and past_value come together (found only " +
        (pk != arrays.end() ? "past_key" : "past_value") + ")");
  if (pk != arrays.end()) {
    const UserArray &a = pk->second, &b = pv->second;
    if (a.shape.size() != 4 || b.shape.size() != 4 || a.dtype != q.dtype || b.dtype != q.dtype || dim(a, 0) != p.B ||
        dim(a, 1) != p.Hkv || dim(a, 3) != p.Dqk || dim(b, 0) != p.B || dim(b, 1) != p.Hkv || dim(b, 2) != dim(a, 2) ||
        dim(b, 3) != p.Dv)
      bad(src + ": past_key " + a.dtype + shape_string(a.shape) + ", past_value " + b.dtype + shape_string(b.shape) +
          " must be [B,Hkv,P,Dqk] and [B,Hkv,P,Dv] (" + r.layout + ") in q's dtype " + q.dtype + ", with k " +
          shape_string(k.shape));
    p.past_len = dim(a, 2);
    p.Lk += p.past_len;
  }
  p.scale = r.scale;
  for (const auto& parameter : r.logit) {
    const std::string& key = parameter.first;
    const double value = parameter.second;
    const auto entry = std::find_if(logit_modifications().begin(), logit_modifications().end(),
                                    [&](const ModEntry& m) { return key == m.fields[0].key; });
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (entry == logit_modifications().end()) bad(flag + ": not a logit-stage parameter");
    set_logit_parameter(p, *entry, value);
  }
  if (!r.causal.empty()) {
    std::string a = r.causal;
    std::replace(a.begin(), a.end(), '-', '_');
    p.causal = true;
    p.alignment = alignment_from_string(a);
  }
  if (r.causal_offset) p.alignment = Alignment::explicit_, p.causal_offset = *r.causal_offset;
  if (!r.window.empty()) {
    if (r.window.size() != 2) bad("--window: expected LEFT,RIGHT (-1 = unbounded)");
    p.window_left = r.window[0], p.window_right = r.window[1];
  }
  p.key_lengths = r.key_lengths;
  p.fully_masked = fully_masked_from_string(r.policy);
  if (!r.fill_value.empty()) p.fill = MaskFill::finite, p.fill_value = std::stod(r.fill_value);
  p.dropout_p = r.dropout_p, p.dropout_seed = r.dropout_seed;
  p.want_lse = r.want_lse, p.want_weights = r.want_weights;
  if (!r.scores_out.empty()) {
    try {
      p.scores_out = scores_out_from_string(r.scores_out);
    } catch (const std::exception&) {
      bad("--scores-out: unknown value '" + r.scores_out + "' (expected scaled, capped, masked)");
    }
  }
  if (!r.max_logit.empty()) {
    if (r.max_logit != "rows" && r.max_logit != "heads")
      bad("--max-logit: unknown value '" + r.max_logit + "' (expected rows, heads)");
    p.max_logit = max_logit_from_string(r.max_logit);
  }

  p.score_expr = r.score_mod, p.mask_expr = r.mask_mod;
  for (const std::string& n : r.aux) {  // auxiliary tensors: declared in order, values concatenated row-major
    const auto it = arrays.find(n);
    static const char* const kReserved[] = {"q", "k", "v", "mask", "bias", "keep", "past_key", "past_value"};
    if (std::find(std::begin(kReserved), std::end(kReserved), n) != std::end(kReserved))
      bad("--aux " + n + ": '" + n + "' is an attention input, not an auxiliary tensor");
    if (it == arrays.end()) bad("--aux " + n + ": no array named '" + n + "' in " + src);
    const UserArray& a = it->second;
    if (a.shape.empty() || a.shape.size() > 4)
      bad("--aux " + n + ": rank must be 1 to 4, got shape " + shape_string(a.shape) + " (" + src + ")");
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
    check_zero_one(src + ": mask", it->second);
    p.mask_shape = broadcast_shape(it->second, "mask", src);
    in.mask = to_tensor(it->second, DType::u8, {p.mask_shape->begin(), p.mask_shape->end()}, Layout::BHSD, false);
  }
  if (auto it = arrays.find("bias"); it != arrays.end()) {
    p.bias_shape = broadcast_shape(it->second, "bias", src);
    p.bias_dtype = it->second.dtype == "float16" ? DType::f16 : it->second.dtype == "float64" ? DType::f64 : DType::f32;
    if (!it->second.is_float()) bad(src + ": bias: dtype " + it->second.dtype + " must be a float type");
    in.bias = to_tensor(it->second, p.bias_dtype, {p.bias_shape->begin(), p.bias_shape->end()}, Layout::BHSD, false);
  }
  if (auto it = arrays.find("keep"); it != arrays.end()) {
    check_zero_one(src + ": keep", it->second);
    if (!(p.dropout_p > 0)) bad(src + ": keep: a dropout keep-mask needs --dropout-p P > 0");
    const std::vector<int64_t> full{p.B, p.Hq, p.Lq, p.Lk};  // keep is not broadcast
    if (it->second.shape != full)
      bad(src + ": keep: shape must be [B,Hq,Lq,Lk]=" + shape_string(full) + ", got " + shape_string(it->second.shape));
    in.keep = to_tensor(it->second, DType::u8, it->second.shape, Layout::BHSD, false);
  } else if (p.dropout_p > 0) {
    bad("--dropout-p " + std::to_string(p.dropout_p) + ": needs a keep array in " + src);
  }
  // The problem is this file's arrays with the flags: its errors (a mask or bias not broadcastable, GQA heads,
  // key_lengths beyond Lk) name the file as well as the field.
  try {
    validate(p, in);
  } catch (const std::invalid_argument& e) {
    bad(src + ": " + e.what());
  }
  check_work(p, false, budget().max_flops);  // before the reference runs
  Provenance prov;
  prov.distribution = "user";
  prov.command = "attncheck import " + std::filesystem::path(src).filename().string();
  const std::string name = r.name.empty() ? p.name() + "/imported" : r.name;
  ImportedCase c{src, {}, {}};
  if (r.judge) c.candidate = from_stdin ? candidate_from_arrays(std::move(members), src, p) : read_candidate(src, p);
  c.fixture = make_fixture(name, p, std::move(in), prov);
  const Fixture& f = c.fixture;
  if (!r.out.empty()) write_fixture(r.out, f);
  if (!r.tolerances.empty()) {  // per-element bounds for outputs in the problem dtype (row-major, logical order)
    std::filesystem::create_directories(r.tolerances);
    write_npy(r.tolerances + "/out.npy", {p.B, p.Hq, p.Lq, p.Dv}, out_tolerance(p, f.expected, f.tolerance));
    write_npy(r.tolerances + "/lse.npy", {p.B, p.Hq, p.Lq}, lse_tolerance(p, f.expected, f.tolerance));
    if (p.want_weights)
      write_npy(r.tolerances + "/weights.npy", {p.B, p.Hq, p.Lq, p.Lk}, weights_tolerance(p, f.expected, f.tolerance));
    if (p.max_logit != MaxLogitOut::none) {  // in the output's form: a head's bound is its rows' largest
      std::vector<double> t = max_logit_tolerance(p, f.expected, f.tolerance);
      write_npy(r.tolerances + "/max_logit.npy", max_logit_shape(p),
                p.max_logit == MaxLogitOut::heads ? max_logit_heads(p, t) : t);
    }
  }
  return c;
}

}  // namespace attncheck
