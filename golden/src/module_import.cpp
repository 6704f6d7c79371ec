// `attncheck import --module ARRAYS.npz --heads H ...`: a module fixture from your own x, weights and flags (see
// user_import.hpp). Array names: x, x2 (cross attention); wq, wk, wv [, bq, bk, bv] or wqkv [, bqkv] (--packing
// packed|interleaved); wo [, bo]; key_padding_mask [B, Lk] (True = ignore, nn.MultiheadAttention's) or mask (1 =
// attend, broadcast to [B, Hq, Lq, Lk]); keep (with --dropout-p); dy [B, Lq, d_out] (the fixture then holds the
// reference gradients). Weights are [out, in] (nn.Linear.weight). docs/module.md.
#include <algorithm>
#include <filesystem>
#include <map>

#include "attncheck/budget.hpp"
#include "attncheck/user_arrays.hpp"
#include "attncheck/user_import.hpp"

namespace attncheck {

namespace {
[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

std::optional<Tensor> tensor(const std::map<std::string, UserArray>& a, const char* name, DType t, bool bf16_bits) {
  const auto it = a.find(name);
  if (it == a.end()) return std::nullopt;
  Tensor out(t, it->second.shape);
  for (size_t n = 0; n < it->second.values.size(); ++n) {
    const double v = it->second.values[n];
    out.set_offset(int64_t(n), bf16_bits ? double(bf16_bits_to_float(uint16_t(v))) : v);
  }
  return out;
}

int64_t rows(const std::map<std::string, UserArray>& a, const char* name) {
  const auto it = a.find(name);
  if (it == a.end() || it->second.shape.size() != 2) bad(std::string(name) + ": needs a 2-d array [out, in]");
  return it->second.shape[0];
}

// d = total / heads, or an error naming the flag and the array it came from.
int64_t per_head(int64_t total, int64_t heads, const std::string& what) {
  if (total % heads != 0)
    bad("--heads " + std::to_string(heads) + ": " + what + " = " + std::to_string(total) +
        " is not divisible by the heads");
  return total / heads;
}
}  // namespace

ModuleFixture import_module_case(const ImportRequest& f, const ModuleImportFlags& flags) {
  if (f.out.empty() || std::filesystem::path(f.out).extension() != ".h5")
    bad("--out: must name a .h5 file, got '" + f.out + "'");
  if (std::filesystem::path(f.input).extension() != ".npz") bad(f.input + ": a module import reads an .npz (np.savez)");
  if (flags.heads < 1)
    bad("--heads: a module import needs the number of query heads (>= 1), got " + std::to_string(flags.heads));
  const std::map<std::string, UserArray> a = read_npz(f.input, budget().max_bytes);
  if (!a.count("x") || a.at("x").shape.size() != 3) bad(f.input + ": needs x [B, L, d_in]");
  if (!a.count("wo")) bad(f.input + ": needs wo [d_out, Hq*Dv]");
  const UserArray& x = a.at("x");
  const bool bf16_bits = f.dtype == "bf16" && x.dtype == "uint16";
  ModuleProblem m;
  Problem& p = m.attn;
  p.dtype = !f.dtype.empty()       ? dtype_from_string(f.dtype)
            : x.dtype == "float16" ? DType::f16
            : x.dtype == "float64" ? DType::f64
                                   : DType::f32;
  p.B = x.shape[0], p.Lq = p.Lk = x.shape[1], m.d_in = x.shape[2];
  if (a.count("x2")) {
    const UserArray& x2 = a.at("x2");
    if (x2.shape.size() != 3) bad(f.input + ": x2 must be [B, Lk, d_in2], got " + shape_string(x2.shape));
    p.Lk = x2.shape[1], m.d_in2 = x2.shape[2];
  }
  p.Hq = flags.heads, p.Hkv = flags.kv_heads > 0 ? flags.kv_heads : flags.heads;
  if (p.Hq % p.Hkv != 0) bad("--kv-heads " + std::to_string(p.Hkv) + ": must divide --heads " + std::to_string(p.Hq));
  const auto& wo = a.at("wo");
  if (wo.shape.size() != 2) bad("wo: must be [d_out, Hq*Dv], got " + shape_string(wo.shape));
  m.d_out = wo.shape[0];
  p.Dv = per_head(wo.shape[1], p.Hq, "wo's in-features (Hq*Dv)");
  if (a.count("wqkv")) {
    m.packing = flags.packing.empty() ? Packing::packed : packing_from_string(flags.packing);
    if (m.packing == Packing::separate) bad("--packing separate: the file holds a packed wqkv");
    p.Dqk = per_head(rows(a, "wqkv") - p.Hkv * p.Dv, p.Hq + p.Hkv, "wqkv's rows minus Hkv*Dv (d_model + Hkv*Dqk)");
  } else {
    p.Dqk = per_head(rows(a, "wq"), p.Hq, "wq's rows (d_model)");
  }
  if (!f.causal.empty()) {
    std::string al = f.causal;
    std::replace(al.begin(), al.end(), '-', '_');
    p.causal = true, p.alignment = alignment_from_string(al);
  }
  p.scale = f.scale;
  p.fully_masked = fully_masked_from_string(f.policy);
  p.dropout_p = f.dropout_p, p.dropout_seed = f.dropout_seed;
  p.want_weights = f.want_weights || flags.average_weights;
  m.average_weights = flags.average_weights;
  m.qkv_bias = a.count("bq") || a.count("bqkv");
  m.out_bias = a.count("bo") > 0;

  const DType t = p.dtype;
  ModuleInputs in;
  in.x = *tensor(a, "x", t, bf16_bits);
  in.x2 = tensor(a, "x2", t, bf16_bits);
  for (const ModuleProjection& w : kModuleProjections) in.*w.tensor = tensor(a, w.name, t, bf16_bits);
  in.wo = *tensor(a, "wo", t, bf16_bits);
  in.bo = tensor(a, "bo", t, bf16_bits);
  if (a.count("key_padding_mask") && a.count("mask")) bad(f.input + ": give key_padding_mask or mask, not both");
  if (const auto it = a.find("key_padding_mask"); it != a.end()) {  // True = ignore (nn.MultiheadAttention)
    check_zero_one(f.input + ": key_padding_mask", it->second);
    if (it->second.shape != std::vector<int64_t>{p.B, p.Lk})
      bad(f.input + ": key_padding_mask: shape must be [B, Lk] = " + shape_string({p.B, p.Lk}) + ", got " +
          shape_string(it->second.shape));
    p.mask_shape = std::array<int64_t, 4>{p.B, 1, 1, p.Lk};
    Tensor mk(DType::u8, {p.B, 1, 1, p.Lk});
    for (int64_t n = 0; n < p.B * p.Lk; ++n) mk.set_offset(n, it->second.values[size_t(n)] != 0 ? 0 : 1);
    in.mask = mk;
  }
  if (const auto it = a.find("mask"); it != a.end()) {  // 1 = attend, numpy-broadcast to [B, Hq, Lq, Lk]
    check_zero_one(f.input + ": mask", it->second);
    const auto& s = it->second.shape;
    if (s.empty() || s.size() > 4) bad(f.input + ": mask: rank must be 1 to 4, got " + shape_string(s));
    std::array<int64_t, 4> full{1, 1, 1, 1};
    std::copy(s.begin(), s.end(), full.begin() + (4 - long(s.size())));
    p.mask_shape = full;
    in.mask = tensor(a, "mask", DType::u8, false);
    in.mask->shape = std::vector<int64_t>(full.begin(), full.end());
  }
  if (const auto it = a.find("keep"); it != a.end()) {
    check_zero_one(f.input + ": keep", it->second);
    in.keep = tensor(a, "keep", DType::u8, false);
  }
  try {
    validate(m, in);
  } catch (const std::invalid_argument& e) {
    bad(f.input + ": " + e.what());
  }
  Provenance prov;
  prov.attncheck_version = attncheck_version();
  prov.distribution = "user";
  prov.command = "attncheck import --module " + std::filesystem::path(f.input).filename().string();
  const std::string name = f.name.empty() ? m.name() + "/imported" : f.name;
  ModuleFixture fx = make_module_fixture(name, m, std::move(in), prov);
  if (a.count("dy")) {
    if (a.at("dy").shape != std::vector<int64_t>{p.B, p.Lq, m.d_out})
      bad(f.input + ": dy: shape must be [B, Lq, d_out] = " + shape_string({p.B, p.Lq, m.d_out}) + ", got " +
          shape_string(a.at("dy").shape));
    add_module_gradients(fx, *tensor(a, "dy", t, bf16_bits));
  }
  write_module_fixture(f.out, fx);
  return fx;
}

}  // namespace attncheck
