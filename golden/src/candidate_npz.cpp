// A candidate's outputs from numpy's .npz (np.savez): members out, lse, weights, scores, present_key,
// present_value, checked like the HDF5 candidate's /actual/... datasets, so a Python tool without h5py can ask
// `attncheck compare` for a verdict. uint16 members are bfloat16 bit patterns (as in an HDF5 candidate).
#include <stdexcept>

#include "attncheck/candidate_arrays.hpp"
#include "attncheck/user_arrays.hpp"
#include "candidate_npz.hpp"
#include "fixture_layout.hpp"

namespace attncheck::fixture_detail {
namespace {

// The member as a tensor of `logical` shape stored as `dims` (`order` empty: contiguous logical order).
std::optional<Tensor> member(const std::string& path, std::map<std::string, UserArray>& all, const std::string& name,
                             const std::vector<int64_t>& logical, const std::vector<int64_t>& dims,
                             const std::vector<int>& order) {
  auto it = all.find(name);
  if (it == all.end()) return std::nullopt;
  const UserArray& a = it->second;
  if (a.shape != dims)
    throw std::invalid_argument(path + ": " + name + ": shape must be " + shape_string(dims) + ", got " +
                                shape_string(a.shape));
  const bool bf16 = a.dtype == "uint16";
  const DType dt = a.dtype == "float16"   ? DType::f16
                   : bf16                 ? DType::bf16
                   : a.dtype == "float32" ? DType::f32
                   : a.dtype == "float64" ? DType::f64
                                          : throw std::invalid_argument(path + ": " + name + ": dtype " + a.dtype +
                                                                        " is not an output dtype (float16, float32, "
                                                                        "float64, or uint16 bfloat16 bit patterns)");
  Tensor t = order.empty() ? Tensor(dt, logical) : Tensor(dt, logical, order);
  for (size_t n = 0; n < a.values.size(); ++n)
    t.set_offset(int64_t(n), bf16 ? double(bf16_bits_to_float(uint16_t(a.values[n]))) : a.values[n]);
  return t;
}

}  // namespace

Outputs read_candidate_npz(const std::string& path, const Problem& p, uint64_t max_bytes) {
  return candidate_from_arrays(read_npz(path, max_bytes), path, p);
}

}  // namespace attncheck::fixture_detail

namespace attncheck {

Outputs candidate_from_arrays(std::map<std::string, UserArray> all, const std::string& path, const Problem& p) {
  using fixture_detail::member, fixture_detail::stored_dims;
  for (const char* n : {"dq", "dk", "dv", "dbias"})
    if (all.count(n))
      throw std::invalid_argument(path + ": " + n + ": gradients are read from an HDF5 candidate (/actual/" + n +
                                  "), not from .npz");
  Outputs o;
  const std::vector<int64_t> out{p.B, p.Hq, p.Lq, p.Dv}, rows{p.B, p.Hq, p.Lq}, w{p.B, p.Hq, p.Lq, p.Lk};
  std::optional<Tensor> t = member(path, all, "out", out, stored_dims(out, p.layout), storage_order(p.layout));
  if (!t)
    throw std::invalid_argument(
        path + ": no member 'out' (a candidate has out [, lse, weights, scores, present_key, present_value])");
  o.out = std::move(*t);
  o.lse = member(path, all, "lse", rows, rows, {});
  o.weights = member(path, all, "weights", w, w, {});
  o.scores = member(path, all, "scores", w, w, {});
  if (p.max_logit != MaxLogitOut::none)
    o.max_logit = member(path, all, "max_logit", max_logit_shape(p), max_logit_shape(p), {});
  if (p.fp8_out) o.amax_o = member(path, all, "amax_o", {1}, {1}, {});  // out then holds O * scale_o
  const std::vector<int64_t> pk{p.B, p.Hkv, p.Lk, p.Dqk}, pv{p.B, p.Hkv, p.Lk, p.Dv};
  o.present_k = member(path, all, "present_key", pk, stored_dims(pk, p.layout), storage_order(p.layout));
  o.present_v = member(path, all, "present_value", pv, stored_dims(pv, p.layout), storage_order(p.layout));
  if (o.present_k.has_value() != o.present_v.has_value())
    throw std::invalid_argument(path + ": present_key and present_value come together (one is missing)");
  return o;
}

}  // namespace attncheck
