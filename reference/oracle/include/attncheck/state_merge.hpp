// The oracle's states and merges (docs/states.md): the fp64 state of a partial attention over a key range, the exact
// merge of N states, and the reference merge of N stored states.
#pragma once

#include <cstdint>
#include <vector>

#include "attncheck/merge_problem.hpp"

namespace attncheck {
inline namespace oracle {

// A plain attention whose keys are partitioned: scale, GQA (Hq a multiple of Hkv) and an optional bottom-right
// causal mask (key j visible to query i iff j <= i + Lk - Lq). q [B,Hq,Lq,D], k and v [B,Hkv,Lk,D], any dtype.
struct PartialSpec {
  int64_t B = 1, Hq = 1, Hkv = 1, Lq = 1, Lk = 1, D = 1;
  double scale = 1.0;
  bool causal = false;
};
// The state of the keys j in [begin[b], end[b]) of each batch row b (begin/end of size 1 apply to every b).
State partial_state(const PartialSpec& s, const Tensor& q, const Tensor& k, const Tensor& v,
                    const std::vector<int64_t>& begin, const std::vector<int64_t>& end);
// The merge, exact up to fp64 rounding: m = max m_i, l = Σ l_i e^(m_i - m), u = Σ u_i e^(m_i - m). Empty states
// contribute nothing; merging only empty states gives the empty state.
State merge_states(const std::vector<State>& states);

// ---- the reference merge -------------------------------------------------------------------------------------------
struct MergeExpected {
  State merged;  // exact (fp64) merge of the decoded stored inputs
};
MergeExpected reference_merge(const MergeProblem& p, const StoredStates& in);
// The merged state's stored exponent per row [B,H,L]: the max of the non-empty inputs' stored lse (or m), exactly
// (a max of fp32 values is one of them); the sentinel for a row of empty states.
std::vector<double> merged_exponent(const MergeProblem& p, const StoredStates& in);

}  // namespace oracle
}  // namespace attncheck
