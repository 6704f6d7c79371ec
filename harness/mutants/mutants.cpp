// One plain looped attention in working precision (fp32, fp64 for fp64 problems) with a switch per bug: each
// mutant differs from the correct base in exactly the way a real kernel got it wrong. The correct variants change
// only what a legitimate implementation may change (summation order, blocking, P rounded before P.V).
#include "mutants.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "attncheck/mods.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/rope.hpp"

namespace attncheck::mutants {
namespace {

enum class Bug {
  reverse_order,
  online_block7,
  p_rounded,  // correct variants
  wrong_scale,
  no_max_subtraction,
  causal_off_by_one,
  causal_wrong_alignment,
  mask_after_softmax_no_renorm,
  softmax_wrong_axis,
  gqa_tiled,
  partial_tile_dropped,
  partial_tile_scored_zero,
  fp16_accumulation,
  logit_after_mask,  // one logit-stage entry (Kernel::late) applied after bias and masking
  finite_fill_uniform,
  dropout_no_rescale,
  lse_off_by_scale,
  masked_values_read,
  mask_before_scale,
  score_mod_sign,
  mask_mod_key_shift,
  rope_pairing_swapped,
  rope_query_offset_ignored
};

template <class T>
struct Kernel {
  const Problem& p;
  const Inputs& in;
  Outputs& out;
  Bug bug;
  const ModEntry* late = nullptr;  // logit_after_mask: the logit entry applied late

  T half(T x) const { return static_cast<T>(round_to(DType::f16, static_cast<double>(x))); }
  // Accumulate y into acc: fp16 accumulators round after every add (the bug), everything else in T.
  void acc(T& a, T y) const { a = bug == Bug::fp16_accumulation ? half(a + y) : a + y; }

  // Rows [0, L) of q (head h) or k (KV head h) after the position stage (QK-norm, RoPE) in fp64, as the
  // reference applies it; the inputs' values without one. The RoPE bugs change only how positions are applied.
  std::vector<double> rows(bool query, int64_t b, int64_t h) const {
    const int64_t L = query ? p.Lq : p.Lk, D = p.Dqk;
    const Tensor& t = query ? in.q : in.k;
    std::vector<double> x(static_cast<size_t>(L * D));
    for (int64_t i = 0; i < L; ++i)
      for (int64_t d = 0; d < D; ++d) x[static_cast<size_t>(i * D + d)] = t.at(b, h, i, d);
    Problem sp = p;
    if (bug == Bug::rope_pairing_swapped) sp.rotary_interleaved = !sp.rotary_interleaved;
    if (query && bug == Bug::rope_query_offset_ignored) std::fill(sp.rope_offsets.begin(), sp.rope_offsets.end(), 0);
    const RopeStage stage(sp);
    for (int64_t i = 0; i < L && stage.on(); ++i)
      query ? stage.query(b, i, &x[static_cast<size_t>(i * D)]) : stage.key(b, i, &x[static_cast<size_t>(i * D)]);
    return x;
  }

  void head(int64_t b, int64_t h) const {
    const int64_t Lq = p.Lq, Lk = p.Lk, D = p.Dqk, Dv = p.Dv;
    const int64_t tile = 16;
    // partial_tile_scored_zero: keys padded to a tile multiple take part with score 0 and value 0.
    const int64_t Lpad = bug == Bug::partial_tile_scored_zero ? (Lk + tile - 1) / tile * tile : Lk;
    const int64_t kvh = bug == Bug::gqa_tiled ? h % p.Hkv : h / p.group_size();
    const T scale = static_cast<T>(bug == Bug::wrong_scale && !p.scale ? 1.0 / double(D) : p.effective_scale());
    const T inf = std::numeric_limits<T>::infinity();
    const bool finite = p.fill == MaskFill::finite || bug == Bug::finite_fill_uniform;
    const T fill = finite ? static_cast<T>(p.fill == MaskFill::finite ? p.fill_value : -1e9) : -inf;
    const bool capped_late = bug == Bug::logit_after_mask && late->used(p);
    // The logit stage's entries as a kernel in T evaluates them: those in place (all but the late one), or the
    // late one.
    auto logit = [&](const ModAt& at, T s, bool in_place) {
      for (const ModEntry& m : logit_modifications()) {
        if (!m.used(p) || (&m == late && capped_late) == in_place) continue;
        if constexpr (std::is_same_v<T, float>)
          s = m.score_f32 ? m.score_f32(p, at, s) : static_cast<float>(m.score(p, at, s));
        else
          s = m.score(p, at, s);
      }
      return s;
    };
    const ModSet mods(p);
    const std::vector<double> qx = rows(true, b, h), kx = rows(false, b, kvh);

    // scores S (Lq, Lpad) and visibility
    std::vector<T> S(static_cast<size_t>(Lq * Lpad));
    std::vector<char> vis(static_cast<size_t>(Lq * Lpad)), part(static_cast<size_t>(Lq * Lpad));
    for (int64_t i = 0; i < Lq; ++i) {
      const int64_t off =
          bug == Bug::causal_wrong_alignment && p.alignment == Alignment::bottom_right ? 0 : p.diagonal_offset(b);
      const int64_t diag = i + off;
      for (int64_t j = 0; j < Lpad; ++j) {
        const size_t n = static_cast<size_t>(i * Lpad + j);
        if (j >= Lk) {  // padding of the last tile, scored 0 instead of -inf
          S[n] = 0, vis[n] = 1;
          continue;
        }
        bool v = true;
        if (p.causal && j > diag + (bug == Bug::causal_off_by_one ? 1 : 0)) v = false;
        if (j >= p.key_length(b)) v = false;
        if (p.window_left >= 0 && j < diag - p.window_left) v = false;
        if (p.window_right >= 0 && j > diag + p.window_right) v = false;
        if (in.mask && in.mask->get_offset(broadcast_offset(*in.mask, b, h, i, j)) == 0) v = false;
        const ModAt at{b, h, i, p.row_keys(b, i).diag, j};
        if (v &&
            mods.has_mask()) {  // mask_mod_key_shift: the modification read at the next key (a boundary off by one)
          ModAt shifted = at;
          if (bug == Bug::mask_mod_key_shift) shifted.j = std::min(j + 1, Lk - 1);
          v = mods.visible(shifted);
        }
        if (bug == Bug::partial_tile_dropped && j >= Lk / tile * tile) v = false;  // the loop skips the last tile
        vis[n] = v;
        if (!v && bug != Bug::mask_after_softmax_no_renorm) {
          // mask_before_scale: the fill goes into the raw dot products, then everything is scaled (-inf * -s = +inf)
          S[n] = bug == Bug::mask_before_scale ? fill * scale : fill;
          if (capped_late) S[n] = logit(at, S[n], false);
          continue;
        }
        T dot = 0;
        for (int64_t e = 0; e < D; ++e) {
          const int64_t d = bug == Bug::reverse_order ? D - 1 - e : e;
          dot +=
              static_cast<T>(qx[static_cast<size_t>(i * D + d)]) * static_cast<T>(kx[static_cast<size_t>(j * D + d)]);
        }
        T s = dot * scale;
        s = logit(at, s, true);
        if (in.bias) s += static_cast<T>(in.bias->get_offset(broadcast_offset(*in.bias, b, h, i, j)));
        if (capped_late) s = logit(at, s, false);
        if (mods.has_score()) {  // score_mod_sign: the modification's change subtracted (ALiBi's sign flipped)
          const double m = mods.score(at, static_cast<double>(s));
          s = static_cast<T>(bug == Bug::score_mod_sign ? 2.0 * static_cast<double>(s) - m : m);
        }
        S[n] = s;
      }
    }
    auto value = [&](int64_t j, int64_t d) { return j >= Lk ? T(0) : static_cast<T>(in.v.at(b, kvh, j, d)); };
    auto keep = [&](int64_t i, int64_t j) -> T {
      if (!in.keep || j >= Lk) return T(1);
      const bool k = in.keep->get_offset(((b * p.Hq + h) * Lq + i) * Lk + j) != 0;
      return k ? (bug == Bug::dropout_no_rescale ? T(1) : static_cast<T>(1.0 / (1.0 - p.dropout_p))) : T(0);
    };

    // weights W (Lq, Lpad) and lse
    std::vector<T> W(S.size(), 0), lse(static_cast<size_t>(Lq)), mrow(static_cast<size_t>(Lq), 0),
        srow(static_cast<size_t>(Lq), 1);
    std::vector<char> empty(static_cast<size_t>(Lq));
    for (int64_t i = 0; i < Lq; ++i) {
      bool any = false;
      // A row is fully masked when no visible key has a finite score (a -inf bias masks too, as in the reference).
      for (int64_t j = 0; j < Lpad; ++j)
        any = any || (vis[static_cast<size_t>(i * Lpad + j)] && S[static_cast<size_t>(i * Lpad + j)] > -inf);
      empty[static_cast<size_t>(i)] = !any && bug != Bug::finite_fill_uniform;
      for (int64_t j = 0; j < Lpad; ++j) {
        const size_t n = static_cast<size_t>(i * Lpad + j);
        const bool dropped = bug == Bug::partial_tile_dropped && j >= Lk / tile * tile && j < Lk;
        // mask_before_scale relies on the (scaled) fill to mask: every key takes part in the softmax
        part[n] = !dropped && (vis[n] || finite || capped_late || bug == Bug::mask_after_softmax_no_renorm ||
                               bug == Bug::mask_before_scale);
      }
    }
    if (bug == Bug::softmax_wrong_axis) {  // normalised over the queries of each key instead of over the keys
      for (int64_t j = 0; j < Lpad; ++j) {
        T m = -inf, sum = 0;
        for (int64_t i = 0; i < Lq; ++i)
          if (part[static_cast<size_t>(i * Lpad + j)]) m = std::max(m, S[static_cast<size_t>(i * Lpad + j)]);
        for (int64_t i = 0; i < Lq; ++i)
          if (part[static_cast<size_t>(i * Lpad + j)] && m > -inf)
            sum += std::exp(S[static_cast<size_t>(i * Lpad + j)] - m);
        for (int64_t i = 0; i < Lq; ++i) {
          const size_t n = static_cast<size_t>(i * Lpad + j);
          W[n] = part[n] && m > -inf ? std::exp(S[n] - m) / sum : T(0);
        }
      }
    }
    for (int64_t i = 0; i < Lq; ++i) {
      T* w = &W[static_cast<size_t>(i * Lpad)];
      const T* s = &S[static_cast<size_t>(i * Lpad)];
      const char* pt = &part[static_cast<size_t>(i * Lpad)];
      if (empty[static_cast<size_t>(i)]) {
        const T x = p.fully_masked == FullyMasked::nan       ? std::numeric_limits<T>::quiet_NaN()
                    : p.fully_masked == FullyMasked::uniform ? T(1) / static_cast<T>(Lk)
                                                             : T(0);
        for (int64_t j = 0; j < Lpad; ++j) w[j] = j < Lk ? x : T(0);
        lse[static_cast<size_t>(i)] = finite ? fill + std::log(static_cast<T>(Lk)) : -inf;
        continue;
      }
      T m = -inf;
      for (int64_t j = 0; j < Lpad; ++j)
        if (pt[j]) m = std::max(m, s[j]);
      if (bug == Bug::no_max_subtraction) m = 0;
      T sum = 0;
      if (bug == Bug::online_block7) {  // online softmax over blocks of 7 keys: running max, rescaled sum
        T run_m = -inf;
        for (int64_t j0 = 0; j0 < Lpad; j0 += 7) {
          T bm = run_m;
          for (int64_t j = j0; j < std::min(j0 + 7, Lpad); ++j)
            if (pt[j]) bm = std::max(bm, s[j]);
          if (bm == -inf) continue;
          sum *= std::exp(run_m - bm);
          for (int64_t j = j0; j < std::min(j0 + 7, Lpad); ++j)
            if (pt[j]) sum += std::exp(s[j] - bm);
          run_m = bm;
        }
        m = run_m;
      } else {
        for (int64_t e = 0; e < Lpad; ++e) {
          const int64_t j = bug == Bug::reverse_order ? Lpad - 1 - e : e;
          if (pt[j]) acc(sum, std::exp(s[j] - m));
        }
      }
      if (bug != Bug::softmax_wrong_axis)
        for (int64_t j = 0; j < Lpad; ++j) w[j] = pt[j] ? std::exp(s[j] - m) / sum : T(0);
      if (bug == Bug::mask_after_softmax_no_renorm)
        for (int64_t j = 0; j < Lpad; ++j)
          if (!vis[static_cast<size_t>(i * Lpad + j)]) w[j] = 0;
      lse[static_cast<size_t>(i)] = m + std::log(sum);
      mrow[static_cast<size_t>(i)] = m, srow[static_cast<size_t>(i)] = sum;
      if (bug == Bug::lse_off_by_scale && scale != 0) lse[static_cast<size_t>(i)] = m / scale + std::log(sum);
    }

    // out = W . (keep * V); p_rounded: unnormalised P rounded to the input dtype before P.V (as FlashAttention)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t d = 0; d < Dv; ++d) {
        T o = 0;
        for (int64_t e = 0; e < Lpad; ++e) {
          const int64_t j = bug == Bug::reverse_order ? Lpad - 1 - e : e;
          T w = W[static_cast<size_t>(i * Lpad + j)];
          // zero weight: the value is never read (it may be poison); masked_values_read multiplies it anyway
          // (0 * NaN = NaN, pytorch#101967)
          if (w == 0 && bug != Bug::masked_values_read) continue;
          if (bug == Bug::p_rounded && !empty[static_cast<size_t>(i)]) {
            const T e = std::exp(S[static_cast<size_t>(i * Lpad + j)] - mrow[static_cast<size_t>(i)]);
            w = static_cast<T>(round_to(p.dtype, static_cast<double>(e))) / srow[static_cast<size_t>(i)];
          }
          acc(o, w * keep(i, j) * value(j, d));
        }
        out.out.put(b, h, i, d, static_cast<double>(o));
      }
    for (int64_t i = 0; i < Lq; ++i) {
      if (out.lse) out.lse->set_offset((b * p.Hq + h) * Lq + i, static_cast<double>(lse[static_cast<size_t>(i)]));
      if (out.weights)
        for (int64_t j = 0; j < Lk; ++j)
          out.weights->set_offset(((b * p.Hq + h) * Lq + i) * Lk + j,
                                  static_cast<double>(W[static_cast<size_t>(i * Lpad + j)]));
    }
  }
};

class Looped final : public Impl {
 public:
  Looped(std::string name, Bug bug, std::string what, bool with_mods, const ModEntry* late = nullptr)
      : name_(std::move(name)), bug_(bug), what_(std::move(what)), with_mods_(with_mods), late_(late) {}
  std::string name() const override { return name_; }
  std::string description() const override { return what_; }
  // The modification library is declared by the correct variants and the mutants of its bugs only: the classic
  // mutants keep the classic feature set (their diagnosis is validated on it, docs/diagnosis.md).
  Capabilities capabilities() const override {
    Capabilities c;
    if (with_mods_)
      for (const ModEntry& m : modifications()) c.mods.insert(m.name);
    return c;
  }
  std::shared_ptr<Looped> declaring_library() const {
    return std::make_shared<Looped>(name_, bug_, what_, true, late_);
  }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h) {
        if (p.dtype == DType::f64)
          Kernel<double>{p, in, out, bug_, late_}.head(b, h);
        else
          Kernel<float>{p, in, out, bug_, late_}.head(b, h);
      }
  }

 private:
  std::string name_;
  Bug bug_;
  std::string what_;
  bool with_mods_;
  const ModEntry* late_;
};

bool modification_bug(Bug b) {
  return b == Bug::score_mod_sign || b == Bug::mask_mod_key_shift || b == Bug::rope_pairing_swapped ||
         b == Bug::rope_query_offset_ignored;
}

}  // namespace

const std::vector<Entry>& catalogue() {
  static const std::vector<Entry> all = [] {
    std::vector<Entry> v;
    auto add = [&](const std::string& name, Bug bug, bool correct, const std::string& what,
                   const ModEntry* late = nullptr) {
      v.push_back({std::make_shared<Looped>(name, bug, what, correct || modification_bug(bug), late), correct, what});
    };
    add("ok-reverse-order", Bug::reverse_order, true, "dot products, sums and P.V in reverse order");
    add("ok-online-block7", Bug::online_block7, true,
        "online softmax over key blocks of 7 (running max, rescaled sum)");
    add("ok-p-rounded", Bug::p_rounded, true,
        "unnormalised P rounded to the input dtype before P.V, fp32 accumulation");
    add("wrong-scale", Bug::wrong_scale, false, "default scale 1/d instead of 1/sqrt(d)");
    add("no-max-subtraction", Bug::no_max_subtraction, false, "exp(s) without subtracting the row max: overflow");
    add("causal-off-by-one", Bug::causal_off_by_one, false, "causal mask j <= i + offset + 1");
    add("causal-wrong-alignment", Bug::causal_wrong_alignment, false, "bottom-right causal computed top-left");
    add("mask-after-softmax", Bug::mask_after_softmax_no_renorm, false,
        "mask applied after softmax, no renormalisation");
    add("softmax-wrong-axis", Bug::softmax_wrong_axis, false, "softmax normalised over queries instead of keys");
    add("gqa-tiled", Bug::gqa_tiled, false, "query head h reads KV head h % Hkv (tile) instead of h / group");
    add("partial-tile-dropped", Bug::partial_tile_dropped, false, "last partial key tile (of 16) skipped");
    add("partial-tile-zero", Bug::partial_tile_scored_zero, false, "last key tile padded with score 0, not -inf");
    add("fp16-accumulation", Bug::fp16_accumulation, false, "softmax sum and P.V accumulated in fp16");
    for (const ModEntry& m : logit_modifications())  // NAME-after-mask: diagnosed as NAME-order
      add(std::string(m.name) + "-after-mask", Bug::logit_after_mask, false,
          std::string(m.name) + " applied after masking (masked -inf -> its limit)", &m);
    add("finite-fill-uniform", Bug::finite_fill_uniform, false, "fill -1e9: fully-masked rows become uniform");
    add("dropout-no-rescale", Bug::dropout_no_rescale, false, "kept weights not rescaled by 1/(1-p)");
    add("lse-off-by-scale", Bug::lse_off_by_scale, false, "lse from the unscaled max: m/scale + log(sum)");
    add("masked-values-read", Bug::masked_values_read, false,
        "V of masked keys multiplied by weight 0: NaN poison leaks");
    add("mask-before-scale", Bug::mask_before_scale, false,
        "mask fill applied before the scale (-inf * negative = +inf)");
    add("score-mod-sign", Bug::score_mod_sign, false,
        "a score modification's change subtracted, not added (ALiBi's sign, attention-gym #86)");
    add("mask-mod-key-shift", Bug::mask_mod_key_shift, false,
        "a mask modification evaluated at key j + 1 (a document or chunk boundary off by one)");
    add("rope-pairing-swapped", Bug::rope_pairing_swapped, false,
        "RoPE pairs GPT-NeoX halves and GPT-J interleaved pairs swapped");
    add("rope-query-offset-ignored", Bug::rope_query_offset_ignored, false,
        "RoPE rotates queries without the sequence's position offset (keys with it)");
    return v;
  }();
  return all;
}

ImplPtr declaring_library(const Entry& e) {
  const auto* looped = dynamic_cast<const Looped*>(e.impl.get());
  return looped ? looped->declaring_library() : e.impl;
}

}  // namespace attncheck::mutants
