// The backward mutants (backward_mutants.hpp): forward = the reference; backward = fp64 loops over rows that take
// P = exp(s - lse) from the forward's lse and D = dO·O from its output, as FlashAttention-2 does, with one fault.
#include "backward_mutants.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "attncheck/mods.hpp"
#include "attncheck/rng.hpp"
#include "attncheck/rope.hpp"
#include "attncheck/tolerance_backward.hpp"
#include "backward_cases.hpp"

namespace attncheck::mutants {

const char* to_string(BwdFault f) {
  switch (f) {
    case BwdFault::none: return "bwd-correct-flash-loops";
    case BwdFault::no_d_term: return "bwd-no-d-term";
    case BwdFault::d_pre_dropout: return "bwd-d-pre-dropout";
    case BwdFault::dropout_not_replayed: return "bwd-dropout-not-replayed";
    case BwdFault::dropout_not_rescaled: return "bwd-dropout-not-rescaled";
    case BwdFault::gqa_not_summed: return "bwd-gqa-not-summed";
    case BwdFault::no_logit_derivative: return "bwd-no-logit-derivative";
    case BwdFault::no_scale_dk: return "bwd-no-scale-dk";
    case BwdFault::no_causal_mask: return "bwd-no-causal-mask";
    case BwdFault::lse_wrong_row: return "bwd-lse-wrong-row";
    case BwdFault::ds_bf16: return "bwd-ds-bf16";
    case BwdFault::d_from_bf16_o: return "bwd-d-from-bf16-o";
    case BwdFault::lse_plus_log2: return "bwd-lse-plus-log2";
    case BwdFault::skip_dq_tile: return "bwd-skip-dq-tile";
    case BwdFault::drop_max_key_dq: return "bwd-drop-max-key-dq";
    case BwdFault::rope_ignored: return "bwd-rope-ignored";
    case BwdFault::rope_not_transposed: return "bwd-rope-not-transposed";
    case BwdFault::score_mod_ignored: return "bwd-score-mod-ignored";
    case BwdFault::mask_mod_ignored: return "bwd-mask-mod-ignored";
  }
  return "?";
}

std::vector<BwdFault> all_backward_faults() {
  return {BwdFault::no_d_term,
          BwdFault::d_pre_dropout,
          BwdFault::dropout_not_replayed,
          BwdFault::dropout_not_rescaled,
          BwdFault::gqa_not_summed,
          BwdFault::no_logit_derivative,
          BwdFault::no_scale_dk,
          BwdFault::no_causal_mask,
          BwdFault::lse_wrong_row,
          BwdFault::rope_ignored,
          BwdFault::rope_not_transposed,
          BwdFault::score_mod_ignored,
          BwdFault::mask_mod_ignored};
}

std::vector<BwdFault> subtle_backward_faults() {
  return {BwdFault::ds_bf16, BwdFault::d_from_bf16_o, BwdFault::lse_plus_log2, BwdFault::skip_dq_tile,
          BwdFault::drop_max_key_dq};
}

std::vector<BwdFault> rope_backward_faults() { return {BwdFault::rope_ignored, BwdFault::rope_not_transposed}; }

namespace {

// cos and sin of every (row, pair) of q or k as a fused kernel forms them under `math` (make_backward_mutant).
class KernelRope {
 public:
  KernelRope(const Problem& p, RopeMath math)
      : p_(p), math_(math), inv_(rope_inv_freq(p)), sections_(rope_pair_sections(p)), m_(rope_attention_factor(p)) {}

  // x (rows of Dqk, logical order) rotated by each row's angles, or (back) by their transposes.
  void rotate(bool query, std::vector<double>& x, bool back) const {
    const int64_t H = query ? p_.Hq : p_.Hkv, L = query ? p_.Lq : p_.Lk, D = p_.Dqk;
    for (int64_t row = 0; row < p_.B * H * L; ++row) {
      const int64_t b = row / (H * L), t = row % L;
      const RopeAt at = query ? rope_query_at(p_, b, t) : rope_key_at(p_, b, t);
      double* v = &x[static_cast<size_t>(row * D)];
      for (int64_t f = 0; f < p_.rotary_dim / 2; ++f) {
        const auto [c, s0] = cos_sin(at.pos[size_t(sections_[size_t(f)])], f);
        const double s = back ? -s0 : s0;
        const auto [a, e] = rope_pair(p_, f);
        const double xa = v[a], xe = v[e];
        v[a] = m_ * (xa * c - xe * s);
        v[e] = m_ * (xe * c + xa * s);
      }
    }
  }

 private:
  std::pair<double, double> cos_sin(int64_t pos, int64_t f) const {
    if (math_ == RopeMath::exact) {
      const double t = static_cast<double>(pos) * inv_[size_t(f)];
      return {std::cos(t), std::sin(t)};
    }
    const float t = static_cast<float>(pos) * static_cast<float>(inv_[size_t(f)]);
    const float c = std::cos(t), s = std::sin(t);
    const DType table = math_ == RopeMath::table_fp16   ? DType::f16
                        : math_ == RopeMath::table_bf16 ? DType::bf16
                                                        : DType::f32;
    return {round_to(table, c), round_to(table, s)};
  }

  const Problem& p_;
  RopeMath math_;
  std::vector<double> inv_;
  std::vector<int> sections_;
  double m_;
};

class LoopedBackward final : public Impl {
 public:
  LoopedBackward(BwdFault f, RopeMath rope) : f_(f), rope_(rope), ref_(find_impl("reference")) {}
  std::string name() const override { return to_string(f_); }
  std::string description() const override { return "test-only backward variant"; }
  Capabilities capabilities() const override { return ref_->capabilities(); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override { ref_->run(p, in, out); }
  Support supports_backward(const Problem& p) const override {
    if (uses_qk_norm(p)) return Support::no("the looped backward mutants have no QK-norm");
    return supports(p);
  }

  void run_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout,
                    Gradients& g) const override {
    const int64_t Lq = p.Lq, Lk = p.Lk, Dqk = p.Dqk, Dv = p.Dv, G = p.group_size(), rows = p.B * p.Hq * Lq;
    const double scale = p.effective_scale(), inf = std::numeric_limits<double>::infinity();
    std::vector<double> q = in.q.to_double(), k = in.k.to_double();
    const std::vector<double> v = in.v.to_double();
    const bool rotates = uses_rope(p) && f_ != BwdFault::rope_ignored;
    const ModSet mods(p);
    const KernelRope rope(p, rope_);
    if (rotates) rope.rotate(true, q, false), rope.rotate(false, k, false);
    const std::vector<double> o = fwd.out.to_double(), dO = dout.to_double(), lse = fwd.lse->to_double();
    std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
    std::vector<double> db(g.dbias ? static_cast<size_t>(g.dbias->numel()) : 0, 0.0);
    const double ks = f_ == BwdFault::dropout_not_rescaled ? 1.0 : 1.0 / (1.0 - p.dropout_p);
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t b = row / (p.Hq * Lq), h = (row / Lq) % p.Hq, i = row % Lq, kvh = p.kv_head(h);
      const bool first = h == kvh * G;
      const bool to_kv = f_ != BwdFault::gqa_not_summed || first;
      const double L = lse[static_cast<size_t>(f_ == BwdFault::lse_wrong_row ? (row + 1) % rows : row)] +
                       (f_ == BwdFault::lse_plus_log2 ? std::log(2.0) : 0.0);
      const int64_t diag = i + p.diagonal_offset(b);
      const double* qi = &q[static_cast<size_t>(row * Dqk)];
      const double* di = &dO[static_cast<size_t>(row * Dv)];
      // chain: the logit stage's derivative (what scale·q·k receives); mod: the score modifications' (what the score
      // before them, the bias included, receives)
      std::vector<double> s(static_cast<size_t>(Lk), -inf), chain(static_cast<size_t>(Lk), 1.0), mod(chain);
      bool live = false;
      for (int64_t j = 0; j < Lk; ++j) {
        if ((p.causal && f_ != BwdFault::no_causal_mask && j > diag) || j >= p.key_length(b)) continue;
        if ((p.window_left >= 0 && j < diag - p.window_left) || (p.window_right >= 0 && j > diag + p.window_right))
          continue;
        if (in.mask && in.mask->get_offset(broadcast_offset(*in.mask, b, h, i, j)) == 0) continue;
        const ModAt at{b, h, i, diag, j};
        if (mods.has_mask() && f_ != BwdFault::mask_mod_ignored && !mods.visible(at)) continue;
        const double* kj = &k[static_cast<size_t>(((b * p.Hkv + kvh) * Lk + j) * Dqk)];
        double x = 0;
        for (int64_t d = 0; d < Dqk; ++d) x += qi[d] * kj[d];
        x *= scale;
        if (mods.has_logit()) {
          if (f_ != BwdFault::no_logit_derivative) chain[static_cast<size_t>(j)] = mods.logit_derivative(at, x);
          x = mods.logit(at, x);
        }
        if (in.bias) x += in.bias->get_offset(broadcast_offset(*in.bias, b, h, i, j));
        if (mods.has_score() && f_ != BwdFault::score_mod_ignored)
          mod[static_cast<size_t>(j)] = mods.derivative(at, x), x = mods.score(at, x);
        s[static_cast<size_t>(j)] = x;
        live = live || x > -inf;
      }
      if (!live) continue;
      const uint8_t* keep = in.keep ? in.keep->data<uint8_t>() + row * Lk : nullptr;
      auto kf = [&](int64_t j) { return (!keep || f_ == BwdFault::dropout_not_replayed) ? 1.0 : (keep[j] ? ks : 0.0); };
      double D = 0;
      if (f_ == BwdFault::d_pre_dropout) {
        for (int64_t j = 0; j < Lk; ++j) {
          const double P = s[static_cast<size_t>(j)] > -inf ? std::exp(s[static_cast<size_t>(j)] - L) : 0.0;
          if (P == 0) continue;
          const double* vj = &v[static_cast<size_t>(((b * p.Hkv + kvh) * Lk + j) * Dv)];
          for (int64_t d = 0; d < Dv; ++d) D += P * di[d] * vj[d];
        }
      } else if (f_ != BwdFault::no_d_term) {
        for (int64_t d = 0; d < Dv; ++d) {  // rowsum(dO∘O)
          const double od = o[static_cast<size_t>(row * Dv + d)];
          D += di[d] * (f_ == BwdFault::d_from_bf16_o ? round_to(DType::bf16, od) : od);
        }
      }
      const int64_t jmax = std::max_element(s.begin(), s.end()) - s.begin();  // drop_max_key_dq's key
      for (int64_t j = 0; j < Lk; ++j) {
        const bool vis = s[static_cast<size_t>(j)] > -inf;
        const double sj = vis ? s[static_cast<size_t>(j)] : (p.fill == MaskFill::finite ? p.fill_value : -inf);
        const double P = sj > -inf ? std::exp(sj - L) : 0.0, pk = P * kf(j);
        if (pk == 0 && (!vis || P == 0)) continue;
        const size_t kv = static_cast<size_t>((b * p.Hkv + kvh) * Lk + j);
        double dp = 0;
        if (pk != 0) {
          for (int64_t d = 0; d < Dv; ++d) {
            dp += di[d] * v[kv * static_cast<size_t>(Dv) + static_cast<size_t>(d)];
            if (to_kv) dv[kv * static_cast<size_t>(Dv) + static_cast<size_t>(d)] += pk * di[d];
          }
          dp *= kf(j);
        }
        if (!vis) continue;
        const double ds1 = P * (dp - D) * mod[static_cast<size_t>(j)];
        const double ds = f_ == BwdFault::ds_bf16 ? round_to(DType::bf16, ds1) : ds1;
        const double dr = ds * chain[static_cast<size_t>(j)];
        const bool to_dq =
            !(f_ == BwdFault::skip_dq_tile && j >= 64 && j < 128) && !(f_ == BwdFault::drop_max_key_dq && j == jmax);
        for (int64_t d = 0; d < Dqk; ++d) {
          if (to_dq)
            dq[static_cast<size_t>(row * Dqk + d)] +=
                scale * dr * k[kv * static_cast<size_t>(Dqk) + static_cast<size_t>(d)];
          if (to_kv)
            dk[kv * static_cast<size_t>(Dqk) + static_cast<size_t>(d)] +=
                (f_ == BwdFault::no_scale_dk ? 1.0 : scale) * dr * qi[d];
        }
        if (g.dbias) db[static_cast<size_t>(broadcast_offset(*g.dbias, b, h, i, j))] += ds;
      }
    }
    if (rotates) {  // the gradients of the rotated q and k, mapped back through the rotation
      rope.rotate(true, dq, f_ != BwdFault::rope_not_transposed);
      rope.rotate(false, dk, f_ != BwdFault::rope_not_transposed);
    }
    auto put = [](Tensor& t, const std::vector<double>& x) {  // logical BHSD order into t's layout
      for (int64_t n = 0; n < t.numel(); ++n) {
        int64_t idx[4], r = n;
        for (int a = 3; a >= 0; --a) {
          idx[a] = r % t.shape[static_cast<size_t>(a)];
          r /= t.shape[static_cast<size_t>(a)];
        }
        t.set(idx, x[static_cast<size_t>(n)]);
      }
    };
    put(g.dq, dq);
    put(g.dk, dk);
    put(g.dv, dv);
    if (g.dbias) put(*g.dbias, db);
  }

 private:
  BwdFault f_;
  RopeMath rope_;
  ImplPtr ref_;
};

// The case with RoPE over its first rotary_dim dims (NeoX or GPT-J pairs, partial on every other case), its tokens
// past a per-batch offset of thousands of positions; unchanged when Dqk < 2.
prop::Case with_rope(prop::Case c, uint64_t n) {
  Problem& p = c.p;
  const int64_t full = p.Dqk - p.Dqk % 2;
  if (full < 2) return c;
  p.rotary_dim = n % 2 && full > 2 ? full - 2 : full;
  p.rotary_interleaved = n % 4 >= 2;
  p.rope_offsets.clear();
  for (int64_t b = 0; b < p.B; ++b) p.rope_offsets.push_back(int64_t(1000 * (n % 7 + 1) + 37 * b));
  validate(p, c.in);
  return c;
}

bool is_rope_fault(BwdFault f) {
  const std::vector<BwdFault> r = rope_backward_faults();
  return std::find(r.begin(), r.end(), f) != r.end();
}

// The case with ALiBi (a score modification) and documents (a mask modification) drawn by their library entries;
// unchanged when the shape cannot take them.
prop::Case with_mods(prop::Case c, uint64_t n) {
  Problem p = c.p;
  Rng rng(n * 104729 + 11);
  for (const char* name : {"alibi", "document"}) find_modification(name)->draw(p, rng);
  try {
    validate(p, c.in);
  } catch (const std::invalid_argument&) {
    return c;
  }
  c.p = p;
  return c;
}

bool is_mod_fault(BwdFault f) { return f == BwdFault::score_mod_ignored || f == BwdFault::mask_mod_ignored; }

}  // namespace

ImplPtr make_backward_mutant(BwdFault f, RopeMath rope) { return std::make_shared<LoopedBackward>(f, rope); }

std::vector<BackwardSelftestResult> run_backward_selftest(int cases, const std::function<bool(size_t)>& runs_entry) {
  std::vector<BwdFault> entries = all_backward_faults();
  entries.insert(entries.begin(), BwdFault::none);
  std::vector<BackwardSelftestResult> out;
  for (size_t index = 0; index < entries.size(); ++index) {
    if (runs_entry && !runs_entry(index)) continue;
    const BwdFault f = entries[index];
    const ImplPtr impl = make_backward_mutant(f);
    BackwardSelftestResult r;
    r.entry = index;
    r.name = to_string(f);
    r.correct = f == BwdFault::none;
    for (int n = 0; n < cases && !r.killed; ++n) {
      // Every third case rotated by RoPE (every case for the RoPE faults), judged at the mutants' declared fp32
      // angles, and every third with ALiBi and documents (every case for the modification faults), so the correct
      // variant shows no false alarm from a rotating or modified backward either.
      prop::Case c = gradtest::grad_case(static_cast<uint64_t>(n), 2500, n % 2 ? DType::f32 : DType::f64);
      if (is_rope_fault(f) || n % 3 == 2) c = with_rope(std::move(c), static_cast<uint64_t>(n));
      if (is_mod_fault(f) || n % 3 == 1) c = with_mods(std::move(c), static_cast<uint64_t>(n));
      const Tensor dout = gradtest::random_dout(c.p, static_cast<uint64_t>(n));
      Gradients g;
      if (!run_backward_impl(*impl, c.p, c.in, dout, g).ok) continue;
      ++r.ran;
      const ExpectedAttention fr = expected_attention(c.p, c.in);
      const ExpectedGradients br = expected_gradients(c.p, c.in, dout);
      ToleranceModel m;
      m.contract = default_contract(c.p.dtype);
      m.contract->rope = RopeMath::fp32;
      const Verdict v = judge_backward(c.p, fr, br, g, m);
      if (!v.pass) {
        r.killed = true;
        r.first_failure = c.name() + ": " + v.worst().describe();
      } else {
        for (const auto& t : v.tensors)
          if (t.tolerance > 0) r.max_ratio = std::max(r.max_ratio, std::abs(t.actual - t.expected) / t.tolerance);
      }
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace attncheck::mutants
