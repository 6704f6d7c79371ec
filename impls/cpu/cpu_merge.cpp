// fp32 merge of N stored states, the way combine kernels compute it (FlashInfer merge_states, vLLM
// merge_attn_states): the row's largest exponent X, weights b^(x_i - X) of the non-empty states only, the weighted
// sum of O, and the lse X + log_b(Σ w). An empty state (its lse the declared sentinel) is skipped, so whatever its
// O holds never reaches the result; a row of empty states gives the empty state.
#include "cpu_merge.hpp"

#include <cmath>
#include <vector>

namespace attncheck::cpu {

Support merge_supported(const MergeProblem& p) {
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    return Support::no(std::string("merge of ") + to_string(p.dtype) + " states not supported");
  return Support::yes();
}

void merge_fp32(const MergeProblem& p, const StoredStates& in, StoredStates& out) {
  const bool norm = p.conv.form == StateForm::normalised, two = p.conv.base == LseBase::two;
  const float sentinel = static_cast<float>(empty_stat_value(p.conv));
  const Tensor& xs = norm ? *in.lse : *in.max;
  std::vector<float> x(static_cast<size_t>(p.N)), l(static_cast<size_t>(p.N)), acc(static_cast<size_t>(p.D));
  std::vector<bool> empty(static_cast<size_t>(p.N));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.L; ++i) {
        float X = -INFINITY;
        bool any = false;
        for (int64_t n = 0; n < p.N; ++n) {
          const int64_t at[4] = {n, b, h, i};
          const size_t k = static_cast<size_t>(n);
          x[k] = static_cast<float>(xs.get(at));
          l[k] = norm ? 1.f : static_cast<float>(in.sum->get(at));
          empty[k] = x[k] == sentinel || l[k] == 0.f;
          if (!empty[k]) X = any ? std::max(X, x[k]) : x[k], any = true;
        }
        float S = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t n = 0; any && n < p.N; ++n) {
          const size_t k = static_cast<size_t>(n);
          if (empty[k]) continue;
          const float w = two ? std::exp2(x[k] - X) : std::exp(x[k] - X);
          S += w * l[k];
          for (int64_t d = 0; d < p.D; ++d) {
            const int64_t at[5] = {n, b, h, i, d};
            acc[static_cast<size_t>(d)] += w * static_cast<float>(in.o.get(at));
          }
        }
        const int64_t st[3] = {b, h, i};
        if (norm)
          out.lse->set(st, any ? X + (two ? std::log2(S) : std::log(S)) : sentinel);
        else
          out.max->set(st, any ? X : sentinel), out.sum->set(st, any ? S : 0.f);
        for (int64_t d = 0; d < p.D; ++d) {
          const int64_t at[4] = {b, h, i, d};
          const float o = !any ? 0.f : norm ? acc[static_cast<size_t>(d)] / S : acc[static_cast<size_t>(d)];
          out.o.set(at, merged_o_to_stored(p.conv, o));  // an fp8 output: divided by its scale, saturated
        }
      }
}

}  // namespace attncheck::cpu
