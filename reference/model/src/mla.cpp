// Absorbed MLA (mla.hpp): v as the first Dv columns of the latent cache k.
#include "attncheck/mla.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "detail.hpp"

namespace attncheck {
inline namespace model {

using detail::fail;

void validate_mla(const Problem& p) {
  if (!p.mla) return;
  if (p.Dv > p.Dqk)
    fail("mla: v is the first Dv columns of k, so Dv must be <= Dqk, got Dqk=" + std::to_string(p.Dqk) +
         ", Dv=" + std::to_string(p.Dv));
  if (p.kv_quantized())
    fail(std::string("mla: a quantized latent cache is not modelled, got kv_scales=") + to_string(p.kv_scales));
  if (p.past_len > 0)
    fail("mla: KV-cache append into a latent cache is not modelled (past_len=" + std::to_string(p.past_len) + ")");
  if (p.descale_v != p.descale_k)
    fail("mla: v is read from k's codes, so descale_v must equal descale_k, got descale_k=" +
         std::to_string(p.descale_k) + ", descale_v=" + std::to_string(p.descale_v));
}

Tensor latent_values(const Problem& p, const Tensor& k) {
  std::vector<int64_t> shape = k.shape;
  shape.back() = p.Dv;
  // v takes k's storage order (the layout), so a row of v is a prefix of a row of k.
  std::vector<int> order(static_cast<size_t>(k.rank()));
  for (size_t d = 0; d < order.size(); ++d) order[d] = static_cast<int>(d);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return k.strides[size_t(a)] > k.strides[size_t(b)]; });
  Tensor v(k.dtype, shape, order);
  const size_t es = dtype_size(k.dtype);
  int64_t idx[4] = {0, 0, 0, 0};
  for (idx[0] = 0; idx[0] < shape[0]; ++idx[0])
    for (idx[1] = 0; idx[1] < shape[1]; ++idx[1])
      for (idx[2] = 0; idx[2] < shape[2]; ++idx[2])
        for (idx[3] = 0; idx[3] < shape[3]; ++idx[3])
          std::memcpy(v.bytes.data() + static_cast<size_t>(v.offset(idx)) * es,
                      k.bytes.data() + static_cast<size_t>(k.offset(idx)) * es, es);
  return v;
}

void tie_latent_values(const Problem& p, Inputs& in) { in.v = latent_values(p, in.k); }

void check_latent_values(const Problem& p, const Inputs& in) {
  if (!p.mla) return;
  const size_t es = dtype_size(in.k.dtype);
  int64_t idx[4] = {0, 0, 0, 0};
  const auto& shape = in.v.shape;
  for (idx[0] = 0; idx[0] < shape[0]; ++idx[0])
    for (idx[1] = 0; idx[1] < shape[1]; ++idx[1])
      for (idx[2] = 0; idx[2] < shape[2]; ++idx[2])
        for (idx[3] = 0; idx[3] < shape[3]; ++idx[3])
          if (std::memcmp(in.v.bytes.data() + static_cast<size_t>(in.v.offset(idx)) * es,
                          in.k.bytes.data() + static_cast<size_t>(in.k.offset(idx)) * es, es) != 0)
            fail("v: with mla, v must be the first Dv columns of k; v[" + std::to_string(idx[0]) + "," +
                 std::to_string(idx[1]) + "," + std::to_string(idx[2]) + "," + std::to_string(idx[3]) +
                 "] = " + std::to_string(in.v.get(idx)) + " but k there is " + std::to_string(in.k.get(idx)));
}

void fold_latent_gradient(const Problem& p, std::vector<double>& dk, std::vector<double>& dv) {
  if (!p.mla) return;
  for (int64_t t = 0; t < p.B * p.Hkv * p.Lk; ++t)
    for (int64_t e = 0; e < p.Dv; ++e) {
      double& k = dk[static_cast<size_t>(t * p.Dqk + e)];
      double& v = dv[static_cast<size_t>(t * p.Dv + e)];
      k += v;
      v = k;
    }
}

void fold_latent_gradient(const Problem& p, Tensor& dk, Tensor& dv) {
  if (!p.mla) return;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hkv; ++h)
      for (int64_t j = 0; j < p.Lk; ++j)
        for (int64_t e = 0; e < p.Dv; ++e) {
          dk.put(b, h, j, e, dk.at(b, h, j, e) + dv.at(b, h, j, e));
          dv.put(b, h, j, e, dk.at(b, h, j, e));
        }
}

}  // namespace model
}  // namespace attncheck
