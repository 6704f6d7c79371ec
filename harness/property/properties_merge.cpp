// Properties of an implementation's merge of attention states (docs/states.md): the states of any partition of the
// keys merge to the whole, in any order; an empty state is an identity; a merged state is itself a state that can
// be merged again. The states come from the generated case's q, k, v (the fp64 partial states of the reference),
// stored under conventions and an O dtype drawn from the case's seed, so shrinking the case shrinks the merge.
// Each merge is judged by judge_merge: against the exact merge of the stored inputs, under the derived bound.
#include <algorithm>
#include <string>
#include <vector>

#include "attncheck/state.hpp"
#include "prop_util.hpp"

namespace attncheck::prop {
namespace {

// A plain softmax with at most a bottom-right causal mask: what a partial state (state.hpp) describes.
void prep_merge(CaseSpec& s) {
  s.mask_kind = 0, s.bias_kind = 0, s.window_left = -1, s.window_right = -1;
  s.logit.clear();
  s.key_padding = false, s.per_batch_offsets = false, s.finite_fill = false, s.dropout_p = 0, s.poison = false;
  s.empty_rows = false, s.sinks_kind = 0, s.scores_out = ScoresOut::none, s.kv_append = false, s.varlen = false;
  s.paged = false, s.Dv = s.Dqk;
  if (s.scale_kind > 1) s.scale_kind = 0;  // a zero or negative scale says nothing more about a merge
  s.alignment = Alignment::bottom_right;
}

struct Drawn {
  MergeProblem p;
  std::vector<State> states;  // in key order: states[n] covers keys [cuts[n], cuts[n+1])
};

// N parts of the keys (some empty, some of one key) under conventions and a dtype drawn from the seed.
Drawn draw(const Case& c, Rng& rng) {
  Drawn d;
  const Problem& q = c.p;
  PartialSpec s;
  s.B = q.B, s.Hq = q.Hq, s.Hkv = q.Hkv, s.Lq = q.Lq, s.Lk = q.Lk, s.D = q.Dqk;
  s.scale = q.effective_scale(), s.causal = q.causal;
  const int64_t parts = rng.pick(2, 6);
  std::vector<int64_t> cuts{0, q.Lk};
  for (int64_t n = 1; n < parts; ++n) cuts.push_back(rng.pick(0, q.Lk));
  std::sort(cuts.begin(), cuts.end());
  for (size_t n = 0; n + 1 < cuts.size(); ++n)
    d.states.push_back(partial_state(s, c.in.q, c.in.k, c.in.v, {cuts[n]}, {cuts[n + 1]}));
  MergeProblem& p = d.p;
  p.N = static_cast<int64_t>(d.states.size()), p.B = q.B, p.H = q.Hq, p.L = q.Lq, p.D = q.Dqk;
  static const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
  p.dtype = kDtypes[rng.pick(0, 2)];
  p.conv.form = rng.pick(0, 1) ? StateForm::unnormalised : StateForm::normalised;
  p.conv.base = rng.pick(0, 1) ? LseBase::two : LseBase::e;
  p.conv.empty_lse = static_cast<EmptyLse>(rng.pick(0, 2));
  p.conv.empty_out = rng.pick(0, 1) ? EmptyOut::undefined : EmptyOut::zero;
  p.conv.layout = rng.pick(0, 1) ? StatLayout::blh : StatLayout::bhl;
  return d;
}

// The implementation's merge of stored states, judged; `kept` (optional) receives its output.
Outcome merged_stored(const Impl& impl, const Case& c, const MergeProblem& p, const StoredStates& in,
                      StoredStates* kept) {
  StoredStates out;
  if (const Support s = run_merge_impl(impl, p, in, out); !s.ok) return Outcome::unsup(s.reason);
  const MergeVerdict v = judge_merge(p, in, out);
  if (kept) *kept = out;
  Outcome o;
  o.ratio = v.worst_ratio;
  if (!v.pass) {
    o.kind = Outcome::fail;
    o.message = impl.name() + " on " + c.name() + ": merge of " + std::to_string(p.N) + " states (" + p.name +
                "): " + v.worst + " (" + std::to_string(v.failed) + " of " + std::to_string(v.checked) +
                " elements outside)\n  spec: " + c.spec.str();
  }
  return o;
}

// The implementation's merge of `states` under d.p's conventions, judged. An undefined empty O is stored as NaN.
Outcome merged(const Impl& impl, const Case& c, MergeProblem p, const std::vector<State>& states, StoredStates* kept) {
  p.N = static_cast<int64_t>(states.size());
  p.name = "merge/" + std::string(to_string(p.dtype)) + "/N" + std::to_string(p.N) + "/" + p.conv.text();
  const StoredStates in = encode_states(p, states, p.conv.empty_out == EmptyOut::undefined);
  return merged_stored(impl, c, p, in, kept);
}

Outcome worse(Outcome a, Outcome b) {
  if (a.kind == Outcome::fail) return a;
  if (b.kind == Outcome::fail || a.kind == Outcome::unsupported) return b;
  a.ratio = std::max(a.ratio, b.ratio);
  return a;
}

// ---- the states of any partition of the keys merge to the whole, in key order and shuffled -------------------
Outcome merge_partition(const Impl& impl, const Case& c) {
  Rng rng(c.spec.seed ^ 0x3e7);
  Drawn d = draw(c, rng);
  Outcome o = merged(impl, c, d.p, d.states, nullptr);
  if (o.kind != Outcome::pass) return o;
  for (size_t n = d.states.size(); n > 1; --n)
    std::swap(d.states[n - 1], d.states[size_t(rng.pick(0, int64_t(n) - 1))]);
  return worse(o, merged(impl, c, d.p, d.states, nullptr));
}

// ---- an empty state is an identity, wherever it stands (its O poisoned when the convention leaves it undefined) --
Outcome merge_empty_identity(const Impl& impl, const Case& c) {
  Rng rng(c.spec.seed ^ 0x3e8);
  Drawn d = draw(c, rng);
  const State none = empty_state(d.p.B, d.p.H, d.p.L, d.p.D);
  for (int k = 0, extra = int(rng.pick(1, 2)); k < extra; ++k)
    d.states.insert(d.states.begin() + rng.pick(0, int64_t(d.states.size())), none);
  return merged(impl, c, d.p, d.states, nullptr);
}

// ---- a merged state merges again: the first parts merged, the result stored as one input among the rest --------
Outcome merge_nested(const Impl& impl, const Case& c) {
  Rng rng(c.spec.seed ^ 0x3e9);
  Drawn d = draw(c, rng);
  const size_t first = size_t(rng.pick(1, int64_t(d.states.size()) - 1));
  StoredStates inner;
  Outcome o = merged(impl, c, d.p, std::vector<State>(d.states.begin(), d.states.begin() + long(first)), &inner);
  if (o.kind != Outcome::pass) return o;
  // The outer inputs: the inner result's stored bits in slot 0 (an empty row keeps the sentinel it was given),
  // then the remaining states stored under the same conventions.
  std::vector<State> outer{empty_state(d.p.B, d.p.H, d.p.L, d.p.D)};
  outer.insert(outer.end(), d.states.begin() + long(first), d.states.end());
  MergeProblem p = d.p;
  p.N = static_cast<int64_t>(outer.size());
  p.name = "merge/" + std::string(to_string(p.dtype)) + "/N" + std::to_string(p.N) + "/" + p.conv.text() + "/nested";
  StoredStates in = encode_states(p, outer, false);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.L; ++i) {
        const int64_t row[3] = {b, h, i}, slot[4] = {0, b, h, i};
        for (auto [to, from] : {std::pair{&in.lse, &inner.lse}, {&in.max, &inner.max}, {&in.sum, &inner.sum}})
          if (*to) (*to)->set(slot, (*from)->get(row));
        for (int64_t e = 0; e < p.D; ++e) {
          const int64_t at[4] = {b, h, i, e}, at0[5] = {0, b, h, i, e};
          in.o.set(at0, inner.o.get(at));
        }
      }
  return worse(o, merged_stored(impl, c, p, in, nullptr));
}

}  // namespace

std::vector<Property> merge_properties() {
  return {
      {"merge_partition",
       "the merge of the states of any partition of the keys (empty and one-key parts too), in "
       "key order and shuffled, equals the exact merge",
       prep_merge, merge_partition},
      {"merge_empty_identity", "empty states (O poisoned where the convention leaves it undefined) change nothing",
       prep_merge, merge_empty_identity},
      {"merge_nested", "a merged state, stored as the merge wrote it, merges again with the rest", prep_merge,
       merge_nested},
  };
}

}  // namespace attncheck::prop
