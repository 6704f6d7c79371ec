// A merge problem (docs/states.md): attention states in fp64, the conventions kernels store them in, and N stored
// states to merge into one. Split-KV decoding, cascade (shared-prefix) attention and chunked prefill are all
// "partial states, then a merge"; the oracle computes states and merges (state_merge.hpp), the tolerance model
// judges a merged result (state.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace model {

// ---- conventions: how a kernel stores a state (declared, never guessed) -----------------------------------------
enum class StateForm : uint8_t { normalised, unnormalised };  // (O, lse) | (O·ℓ unnormalised, row max m, sum ℓ)
enum class LseBase : uint8_t { e, two };                      // lse and m in nats or in bits (log2)
enum class EmptyLse : uint8_t { neg_inf, pos_inf, finite };   // the lse (or m) of a state that saw no key
enum class EmptyOut : uint8_t { zero, undefined };            // the O of an empty state: 0, or anything (NaN too)
enum class StatLayout : uint8_t { bhl, blh };                 // lse/m/ℓ stored [B,H,L] or [B,L,H] ([tokens,H])
enum class OutLayout : uint8_t { bhld, blhd };                // O stored [B,H,L,D] or [B,L,H,D] ([tokens,H,D])

struct StateConventions {
  StateForm form = StateForm::normalised;
  LseBase base = LseBase::e;
  EmptyLse empty_lse = EmptyLse::neg_inf;
  double sentinel = -1e30;  // the empty lse under EmptyLse::finite
  EmptyOut empty_out = EmptyOut::zero;
  StatLayout layout = StatLayout::bhl;
  OutLayout o_layout = OutLayout::bhld;
  // An fp8 merged O (normalised form only): stored = fp8(O / out_scale), saturated at the format's largest finite
  // value, so O = stored · out_scale (the dequantisation scale, as vLLM's merge_attn_states output_scale). Unset: the
  // merged O has the inputs' dtype.
  std::optional<DType> out_dtype;
  double out_scale = 1.0;
  // Lossless text, e.g. "normalised,base=e,empty=-inf,out=zero,layout=bhl" (",olayout=blhd" is appended only for
  // the token-major O, ",odtype=fp8_e4m3,oscale=0.0078125" only for an fp8 output); parse_conventions reads it back
  // and throws std::invalid_argument naming the field and value.
  std::string text() const;
  bool operator==(const StateConventions&) const = default;
};
StateConventions parse_conventions(const std::string& text);
// The stored lse (or max) of an empty state: -inf, +inf, or the finite sentinel rounded to fp32 (stats are fp32).
double empty_stat_value(const StateConventions& c);
// The merged O as stored: O / out_scale saturated at the fp8 format's largest value (O itself without an fp8 output;
// the caller's store rounds it to the dtype). And back: a stored merged O element as the O it stands for.
double merged_o_to_stored(const StateConventions& c, double o);
double merged_o_from_stored(const StateConventions& c, double stored);

// ---- a state in fp64, independent of any convention ---------------------------------------------------------------
// Per row r = (b, h, i): m = max of the visible scaled scores (nats), l = Σ exp(s - m), u = Σ exp(s - m)·v.
// A row that saw no key is empty: l = 0, m = -inf, u = 0. lse = m + ln l; O = u / l.
struct State {
  int64_t B = 0, H = 0, L = 0, D = 0;
  std::vector<double> m, l;  // [B,H,L]
  std::vector<double> u;     // [B,H,L,D]
  int64_t rows() const { return B * H * L; }
  bool empty(int64_t r) const { return l[r] == 0; }
  double lse(int64_t r) const;             // nats; -inf when empty
  double out(int64_t r, int64_t d) const;  // normalised O; 0 when empty
};
State empty_state(int64_t B, int64_t H, int64_t L, int64_t D);

// ---- a merge problem: N stored states -> one stored state ---------------------------------------------------------
struct MergeProblem {
  std::string name;  // case name, e.g. "merge/fp16/N2-B1-H4-L3-D32/normalised,base=e,.../one_empty"
  int64_t N = 2, B = 1, H = 1, L = 1, D = 1;
  DType dtype = DType::f32;  // O in, and out unless conv.out_dtype; lse, m and ℓ are always fp32
  StateConventions conv;
};
void validate(const MergeProblem& p);  // std::invalid_argument naming the field and the value

// Stored states, stacked: o [N,B,H,L,D] (dtype); normalised: lse [N,B,H,L]; unnormalised: max and sum [N,B,H,L]
// (fp32; the stat tensors' memory order follows conv.layout: [N,B,L,H] for blh; o's follows conv.o_layout:
// [N,B,L,H,D] for blhd). Indices are always logical (b, h, i); only the strides differ.
struct StoredStates {
  Tensor o;
  std::optional<Tensor> lse, max, sum;
};
// Allocated in the problem's layout: o [B,H,L,D], stats [B,H,L] (or [N=1] dropped).
StoredStates make_merge_outputs(const MergeProblem& p);
StoredStates make_merge_inputs(const MergeProblem& p);

// Store N fp64 states under the conventions (O rounded to dtype, stats to fp32). `poison_empty_out` writes NaN into
// the O of empty states (allowed only under EmptyOut::undefined).
StoredStates encode_states(const MergeProblem& p, const std::vector<State>& states, bool poison_empty_out);
// Read stored state n (n = -1: an output tensor set) back into fp64 under the conventions; an lse equal to the
// declared sentinel is an empty row.
State decode_state(const MergeProblem& p, const StoredStates& s, int64_t n);

// Stored elements by logical index: state n's (n = -1: an output tensor set's) stat or O element of row
// r = (b·H + h)·L + i, whatever the layout.
double stored_stat(const Tensor& t, const MergeProblem& p, int64_t n, int64_t r);
double stored_o(const Tensor& t, const MergeProblem& p, int64_t n, int64_t r, int64_t d);
// An lse or max in nats as the conventions store it (in bits for base 2).
double to_stored_units(const StateConventions& c, double nats);
// The shortest %g text that reads back as x (names, conventions and verdicts stay short and lossless).
std::string shortest_text(double x);

}  // namespace model
}  // namespace attncheck
