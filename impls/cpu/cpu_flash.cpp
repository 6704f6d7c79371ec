// `cpu-flash`: the fused online-softmax implementation. Work is dealt by (batch, head, query block); the workers
// on a head share its K/V panels (cpu_pack.hpp), packed once. Short queries (decode) of the query heads sharing a KV
// head are the rows of one tile (GQA packing, as FlashMLA and FlashInfer do), so K/V (MLA: the latent cache) are read
// once per KV head, not once per query head, and the GEMMs get rows to reuse each key with. Keys are visited in
// blocks (tiles of kFlashBlockQ x kFlashBlockK, or the SmallD sizes) with a running max, denominator and rescaled
// accumulator, with the SIMD GEMM and exp of simd.hpp, so no Lq x Lk matrix exists (memory: O(Lk·D) panels per head
// in flight + O(Bq·(Bk + D)) per thread). Key blocks outside every row's causal / window / padding span are skipped
// (with a -inf fill their weight is exactly 0). Short-query problems (decode) split the keys into chunks computed in
// parallel and merged by their lse. Weights, when requested, come from a second pass that recomputes each score
// block with the final max and sum.
#include <memory>
#include <mutex>

#include "attncheck/block_mask.hpp"
#include "attncheck/schedule.hpp"
#include "attncheck/state_partials.hpp"
#include "cpu_common.hpp"
#include "cpu_impls.hpp"
#include "cpu_pack.hpp"

namespace attncheck::cpu {
namespace {

// Fewer (batch, head, query block) tasks than this: split the keys. A constant (not the thread count), so results
// are bitwise the same for any number of threads.
constexpr int64_t kMinTasks = 8;
// Rows of a query block whose GEMMs share one key range (a multiple of the GEMM tile rows, 6 and 8): on a causal
// diagonal block each group stops at its own last visible key instead of the block's.
constexpr int64_t kGroupRows = 24;

// Running softmax state of nr rows: max, visible max, denominator and the unnormalised accumulator (nr x dvp).
template <class T>
struct RowState {
  std::vector<T> m, mvis, l, acc;
  void reset(int64_t nr, int64_t dvp) {
    m.assign(static_cast<size_t>(nr), -std::numeric_limits<T>::infinity());
    mvis.assign(static_cast<size_t>(nr), -std::numeric_limits<T>::infinity());
    l.assign(static_cast<size_t>(nr), T(0));
    acc.assign(static_cast<size_t>(nr * dvp), T(0));
  }
};

// Head dims of at most 64: wider key blocks (cpu_impls.hpp).
inline bool small_heads(const Problem& p) { return p.Dqk <= 64 && p.Dv <= 64; }

template <class T>
class Flash {
 public:
  // With `partials`, the keys are split into `num_splits` parts (at most one per key block) even where the schedule
  // would not split, and each part's state is copied there before the merge.
  Flash(const Problem& p, const Inputs& in, Outputs& out, KernelPartials* partials = nullptr, int64_t num_splits = 0)
      : partials_(partials),
        num_splits_(num_splits),
        p_(p),
        in_(in),
        out_(out),
        sc_(p, in),
        keep_scale_(static_cast<T>(1.0 / (1.0 - p.dropout_p))),
        pol_w_(policy_weight<T>(p)),
        pol_lse_(policy_lse<T>(p)),
        W_(simd::strip_width<T>()),
        dvp_((p.Dv + W_ - 1) / W_ * W_),
        bq_(small_heads(p) ? kFlashBlockQSmallD : kFlashBlockQ),
        bk_(small_heads(p) ? kFlashBlockKSmallD : kFlashBlockK),
        pairs_(std::is_same_v<T, float> && bf16_pairs_apply(p, in)),
        rope_(p) {
    // A block mask handed to the run at this kernel's tiles (block_mask.hpp): empty blocks skipped, full blocks
    // without per-key mask work. Not with a finite fill, where masked keys take part.
    const BlockMask* m = current_block_mask();
    if (m && m->q_block == bq_ && m->kv_block == bk_ && !sc_.finite_fill()) {
      validate_block_mask(*m, p);
      kinds_ = block_kinds(*m, p);
      nqb_ = blocks_of(p.Lq, bq_), nkb_ = blocks_of(p.Lk, bk_);
    }
    // Head packing: when a head's queries do not fill a tile. Not with the per-head second passes (weights, raw
    // scores), a split exposed as partials or a block mask (their tiles are per head).
    const int64_t grp = p.group_size();
    if (grp > 1 && p.Lq < bq_ && kinds_.empty() && !partials_ && !out.weights && !out.scores) {
      pack_ = grp;
      // The unit's rows in equal query blocks of whole kGroupRows (a 128-head MLA decode: 2 x 72, not 96 + 32).
      const int64_t n = blocks_of(pack_ * p.Lq, bq_);
      bq_ = (blocks_of(pack_ * p.Lq, n) + kGroupRows - 1) / kGroupRows * kGroupRows;
    }
    units_ = p.Hq / pack_, rows_ = pack_ * p.Lq;
  }

  void run() {
    const int64_t Bq = bq_, Bk = bk_;
    const int64_t nqb = (rows_ + Bq - 1) / Bq, heads = p_.B * units_, nkb = (p_.Lk + Bk - 1) / Bk;
    const int threads = cpu_threads();
    std::vector<Work> work(static_cast<size_t>(std::max(threads, 1)));
    // A schedule's num_splits forces the count (never more parts than key blocks); otherwise split only when there
    // are too few tasks. Never with weights or raw scores: their second pass needs the whole row's max and sum.
    const int64_t forced = partials_ ? std::max<int64_t>(num_splits_, 1) : current_schedule().num_splits;
    const int64_t split = out_.weights || out_.scores ? 1
                          : forced > 0                ? std::min(forced, nkb)
                          : heads * nqb >= kMinTasks  ? 1
                                                      : std::clamp(kMinTasks / (heads * nqb), int64_t{1}, nkb);
    if (split == 1 && nqb > 1 && !partials_) {
      shared_heads(heads, nqb, threads, work);
      return;
    }
    if (split == 1 && !partials_) {  // one query block per head: one task per head
      parallel_tasks(heads, threads, [&](int64_t t, int worker) {
        head_task(t / units_, t % units_, 0, 0, p_.Lk, work[static_cast<size_t>(worker)], nullptr);
      });
      return;
    }
    std::vector<RowState<T>> part(static_cast<size_t>(heads * nqb * split));
    parallel_tasks(heads * nqb * split, threads, [&](int64_t t, int worker) {
      const int64_t c = t % split, bq = t / split, bh = bq / nqb, qb = bq % nqb;
      const int64_t ka = c * nkb / split * Bk, kb = std::min(p_.Lk, (c + 1) * nkb / split * Bk);
      head_task(bh / units_, bh % units_, qb, ka, kb, work[static_cast<size_t>(worker)], &part[static_cast<size_t>(t)]);
    });
    if (partials_) expose(part, split, nqb, nkb);
    parallel_tasks(heads * nqb, threads, [&](int64_t t, int worker) {
      const int64_t bh = t / nqb, i0 = t % nqb * Bq, nr = std::min(Bq, rows_ - i0);
      Work& w = work[static_cast<size_t>(worker)];
      merge(&part[static_cast<size_t>(t * split)], split, nr, w.st);
      finish(bh / units_, bh % units_, i0, nr, w);
    });
  }

 private:
  struct Work {
    std::vector<T> Q, S, o, bmax;  // bmax: this block's visible max per row
    std::vector<uint32_t> Q2;      // Q as bf16 pairs (load_q), when q2
    bool q2 = false;
    std::vector<T> mnew, shift, sums;  // per row: the new running max, the exp's shift, the exp's sum
    std::vector<Span> spans;
    std::vector<Span> groups;     // per kGroupRows rows: the union of their spans
    Panels<T> own;                // panels of a task that packs its own
    const Panels<T>* pan = &own;  // the panels in use: own, or a head's shared ones
    RowState<T> st;
    int64_t ulo = 0, uhi = 0;  // union of the current block's visible spans
  };
  static constexpr T kNegInf = -std::numeric_limits<T>::infinity();

  // Work is dealt by units of pack_ query heads sharing a KV head (one head without packing), each with rows_ =
  // pack_ * Lq rows: row t of unit u is query t / pack_ of head u * pack_ + t % pack_ (without packing, query t of
  // head u). The functions below take (b, u, first row i0, rows nr).
  int64_t head_of(int64_t u, int64_t t) const { return u * pack_ + t % pack_; }
  int64_t query_of(int64_t t) const { return t / pack_; }

  // The handed block mask's kind of the tile at rows i0.. and keys j0.. (both tile starts); partial without one
  // (never with packed heads).
  BlockKind block_kind(int64_t b, int64_t u, int64_t i0, int64_t j0) const {
    if (kinds_.empty()) return BlockKind::partial;
    return kinds_[static_cast<size_t>(((b * p_.Hq + u) * nqb_ + i0 / bq_) * nkb_ + j0 / bk_)];
  }

  // Whether a mask modification hides keys [j0, j1) from every row of [i0, i0 + nr) (mods_hide_block per head).
  bool mods_hide(int64_t b, int64_t u, int64_t i0, int64_t nr, const Work& w, int64_t j0, int64_t j1) const {
    if (pack_ == 1) return sc_.mods_hide_block(b, u, i0, nr, w.spans.data(), j0, j1);
    for (int64_t r = 0; r < nr; ++r)
      if (!sc_.mods_hide_block(b, head_of(u, i0 + r), query_of(i0 + r), 1, &w.spans[static_cast<size_t>(r)], j0, j1))
        return false;
    return true;
  }

  // Rows [i0, i0 + nr): their spans, the union of them and of each group of kGroupRows rows.
  void spans(int64_t b, int64_t i0, int64_t nr, Work& w) const {
    w.spans.resize(static_cast<size_t>(nr));
    w.groups.assign(static_cast<size_t>((nr + kGroupRows - 1) / kGroupRows), Span{p_.Lk, 0});
    w.ulo = p_.Lk, w.uhi = 0;
    for (int64_t r = 0; r < nr; ++r) {
      const Span s = w.spans[static_cast<size_t>(r)] = sc_.span(b, query_of(i0 + r));
      Span& g = w.groups[static_cast<size_t>(r / kGroupRows)];
      if (s.lo < s.hi) {
        w.ulo = std::min(w.ulo, s.lo), w.uhi = std::max(w.uhi, s.hi);
        g.lo = std::min(g.lo, s.lo), g.hi = std::max(g.hi, s.hi);
      }
    }
  }

  // First key (a multiple of bk_ from ka) and end of the keys in [ka, kb) that query blocks [qa, qe) of
  // batch b can need: the union of their spans, or all of [ka, kb) when masked keys take part (or show).
  std::pair<int64_t, int64_t> key_range(int64_t b, int64_t qa, int64_t qe, int64_t ka, int64_t kb, Work& w) const {
    int64_t lo = kb, hi = ka;
    for (int64_t qb = qa; qb < qe; ++qb) {
      const int64_t i0 = qb * bq_;
      spans(b, i0, std::min(bq_, rows_ - i0), w);
      lo = std::min(lo, w.ulo), hi = std::max(hi, w.uhi);
    }
    if (sc_.finite_fill() || raw_scores()) lo = ka, hi = kb;
    lo = std::max(lo, ka), hi = std::min(hi, kb);
    const int64_t pa = lo < hi ? ka + (lo - ka) / bk_ * bk_ : ka;
    return {pa, std::max(pa, hi)};
  }

  // Heads with several query blocks: units (head, query block) claimed in order from one counter, heads in order
  // and each head's blocks from the last (the most keys under a causal mask) to the first. The workers on a head
  // share its panels, packed by the first to reach it and released by the last to leave it. So threads are balanced
  // by blocks, not whole heads (a thread slowed by another process no longer holds up the end by a whole head), and
  // the panels being read are one head's, not one per thread (half the cache footprint with two threads). The
  // worker that takes the middle block of a head packs the next head's panels, so the others do not wait for them.
  struct SharedHead {
    std::once_flag packed;
    Panels<T> pan;
    std::atomic<int64_t> left{0};  // blocks not finished yet
  };
  void shared_heads(int64_t heads, int64_t nqb, int threads, std::vector<Work>& work) const {
    std::unique_ptr<SharedHead[]> sh(new SharedHead[static_cast<size_t>(heads)]);
    for (int64_t bh = 0; bh < heads; ++bh) sh[static_cast<size_t>(bh)].left = nqb;
    std::mutex spare_mu;
    std::vector<Panels<T>> spare;  // panels of finished heads: their buffers are reused, not mapped afresh
    auto packed = [&](int64_t bh, Work& w) -> SharedHead& {
      SharedHead& s = sh[static_cast<size_t>(bh)];
      std::call_once(s.packed, [&] {
        {
          const std::lock_guard<std::mutex> lock(spare_mu);
          if (!spare.empty()) s.pan = std::move(spare.back()), spare.pop_back();
        }
        const int64_t b = bh / units_;
        const auto [pa, pe] = key_range(b, 0, nqb, 0, p_.Lk, w);
        s.pan.pack(p_, in_, b, kv_head(bh % units_), pa, pe, false, pairs_);
      });
      return s;
    };
    parallel_tasks(heads * nqb, threads, [&](int64_t t, int worker) {
      const int64_t bh = t / nqb, qb = nqb - 1 - t % nqb, b = bh / units_, h = bh % units_;
      Work& w = work[static_cast<size_t>(worker)];
      SharedHead& s = packed(bh, w);
      w.pan = &s.pan;
      const int64_t i0 = qb * bq_, nr = std::min(bq_, rows_ - i0);
      block(b, h, i0, nr, s.pan.k0, p_.Lk, false, w, w.st);
      finish(b, h, i0, nr, w);
      w.pan = &w.own;
      if (s.left.fetch_sub(1) == 1) {  // the last block of the head: nobody reads its panels again
        const std::lock_guard<std::mutex> lock(spare_mu);
        spare.push_back(std::move(s.pan));
      }
      if (t % nqb == nqb / 2 && bh + 1 < heads) packed(bh + 1, w);
    });
  }

  // Query block qb of head h against keys [ka, kb): its final result goes to the outputs, or (key chunks) its state
  // to *part. Nothing to reuse across query blocks here, so without weights/scores each key block is packed just
  // before its use and K/V are read from memory once; else the panels of the block's keys are packed first.
  void head_task(int64_t b, int64_t h, int64_t qb, int64_t ka, int64_t kb, Work& w, RowState<T>* part) const {
    const auto [pa, pe] = key_range(b, qb, qb + 1, ka, kb, w);
    const bool per_block = !out_.weights && !out_.scores;
    if (!per_block) w.own.pack(p_, in_, b, kv_head(h), pa, pe, false, pairs_);
    const int64_t i0 = qb * bq_, nr = std::min(bq_, rows_ - i0);
    RowState<T>& st = part ? *part : w.st;
    block(b, h, i0, nr, pa, kb, per_block, w, st);
    if (!part) finish(b, h, i0, nr, w);
  }

  bool raw_scores() const { return p_.scores_out == ScoresOut::scaled || p_.scores_out == ScoresOut::capped; }
  int64_t kv_head(int64_t u) const { return p_.kv_head(u * pack_); }

  // Final scores of rows [i0, i0 + nr) against keys [j0, j0 + nc) into w.S (row stride bk_). Only the
  // strips covering [c0, c1) (the union of the rows' spans) go through the GEMM; the scorer fills the rest.
  void scores(int64_t b, int64_t h, int64_t i0, int64_t nr, int64_t j0, int64_t nc, int64_t c0, int64_t c1, Work& w,
              T* mvis) const {
    dots(nr, j0, c0, c1, w);
    for (int64_t r = 0; r < nr; ++r) {
      const T mv = sc_.process(b, head_of(h, i0 + r), query_of(i0 + r), j0, w.S.data() + r * bk_, nc,
                               w.spans[static_cast<size_t>(r)]);
      w.bmax[static_cast<size_t>(r)] = mv;
      if (mvis) mvis[r] = mv > mvis[r] ? mv : mvis[r];
    }
  }

  // Raw dot products of rows [r0, r0 + nr) of w.Q against keys [c0, c1) into w.S (columns from j0; whole strips).
  void dots(int64_t r0, int64_t nr, int64_t j0, int64_t c0, int64_t c1, Work& w) const {
    const int64_t ld = bk_;
    const T* Q = w.Q.data() + r0 * p_.Dqk;
    T* S = w.S.data() + r0 * ld;
    if (c0 < c1 && w.pan->rows) {
      w.pan->dots_rows(nr, c1 - c0, Q, p_.Dqk, c0, S + (c0 - j0), ld);
    } else if (c0 < c1) {
      const int64_t sa = (c0 - j0) / W_, sb = (c1 - j0 + W_ - 1) / W_;
      if (w.q2 && w.pan->pairs)  // avx3_bf16: both operands as bf16 pairs
        return w.pan->dots_pairs(nr, (sb - sa) * W_, w.Q2.data() + r0 * w.pan->kp, j0 + sa * W_, S + sa * W_, ld);
      simd::gemm<T>(nr, (sb - sa) * W_, p_.Dqk, Q, p_.Dqk, w.pan->kt_at(j0 + sa * W_), p_.Dqk * W_, W_, S + sa * W_, ld,
                    false);
    }
  }
  void dots(int64_t nr, int64_t j0, int64_t c0, int64_t c1, Work& w) const { dots(0, nr, j0, c0, c1, w); }

  // Rows [i0, i0 + nr) of Q into w.Q, and (pairs_) as bf16 pairs into w.Q2: q2 when none of them is subnormal.
  void load_q(int64_t b, int64_t h, int64_t i0, int64_t nr, Work& w) const {
    w.Q.resize(static_cast<size_t>(nr * p_.Dqk));
    if (pack_ == 1) {
      load_rows(in_.q, b, h, i0, i0 + nr, w.Q.data());
      rotate_rows(rope_, true, b, i0, i0 + nr, p_.Dqk, w.Q.data());  // RoPE (no-op without)
    } else {
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t i = query_of(i0 + r);
        T* q = w.Q.data() + r * p_.Dqk;
        load_rows(in_.q, b, head_of(h, i0 + r), i, i + 1, q);
        rotate_rows(rope_, true, b, i, i + 1, p_.Dqk, q);
      }
    }
    w.q2 = false;
    if constexpr (std::is_same_v<T, float>) w.q2 = pairs_ && q_as_pairs(w.Q.data(), nr, p_.Dqk, w.Q2);
  }

  // One query block against key blocks from pa (a multiple of bk_) to kb: the online softmax into st.
  // `pack`: pack each key block's panels here (else the task packed them all).
  void block(int64_t b, int64_t h, int64_t i0, int64_t nr, int64_t pa, int64_t kb, bool pack, Work& w,
             RowState<T>& st) const {
    const int64_t Bk = bk_;
    w.S.resize(static_cast<size_t>(nr * Bk));
    w.bmax.resize(static_cast<size_t>(nr));
    w.mnew.resize(static_cast<size_t>(nr));
    w.shift.resize(static_cast<size_t>(nr));
    w.sums.resize(static_cast<size_t>(nr));
    load_q(b, h, i0, nr, w);
    spans(b, i0, nr, w);
    st.reset(nr, dvp_);
    // The running max starts at the sink: terms far below it (a finite fill) then weigh exactly 0 from the start,
    // as in the reference, instead of weighing 1 until finish() rescales them (0 * a poisoned value is NaN).
    for (int64_t r = 0; r < nr; ++r)
      if (const T sink = static_cast<T>(p_.sink(head_of(h, i0 + r))); sink != kNegInf)
        st.m[static_cast<size_t>(r)] = sink;
    const bool finite = sc_.finite_fill();
    for (int64_t j0 = pa; j0 < kb; j0 += Bk) {
      const int64_t j1 = std::min(j0 + Bk, kb), nc = j1 - j0;
      const int64_t c0 = std::max(j0, w.ulo), c1 = std::min(j1, w.uhi);
      if (c0 >= c1 && !finite) continue;  // every key of the block is masked for every row: weight exactly 0
      const BlockKind kind = block_kind(b, h, i0, j0);
      if (kind == BlockKind::empty) continue;                                         // the same, from the block mask
      if (kinds_.empty() && !finite && mods_hide(b, h, i0, nr, w, j0, j1)) continue;  // by a mask mod
      const bool full = kind == BlockKind::full;  // every key visible to every row: no per-key mask
      // A few rows: dot products against K rows as loaded (no transposed panel to build for one use).
      if (pack) w.own.pack(p_, in_, b, kv_head(h), j0, finite ? j1 : c1, nr <= kFewRows, pairs_);
      // S = Q·Kᵀ per group of rows over the group's visible keys in this block (the scorer fills the rest).
      for (int64_t g0 = 0; g0 < nr; g0 += kGroupRows) {
        const Span& g = w.groups[static_cast<size_t>(g0 / kGroupRows)];
        dots(g0, std::min(kGroupRows, nr - g0), j0, std::max(c0, g.lo), std::min(c1, g.hi), w);
      }
      for (int64_t r = 0; r < nr; ++r) {
        const T mv = sc_.process(b, head_of(h, i0 + r), query_of(i0 + r), j0, w.S.data() + r * Bk, nc,
                                 w.spans[static_cast<size_t>(r)], full);
        w.bmax[static_cast<size_t>(r)] = mv;
        st.mvis[static_cast<size_t>(r)] = std::max(st.mvis[static_cast<size_t>(r)], mv);
      }
      // Online softmax: S becomes exp(s - m_new) (times keep / (1 - p)), all rows in one call; l and acc are
      // rescaled to the new max.
      for (int64_t r = 0; r < nr; ++r) {
        const size_t rr = static_cast<size_t>(r);
        // Masked keys at -inf cannot raise the max; with a finite fill they take part like visible ones.
        w.mnew[rr] = finite ? row_max(w.S.data() + r * Bk, nc, st.m[rr]) : std::max(st.m[rr], w.bmax[rr]);
        w.shift[rr] = w.mnew[rr] == kNegInf ? T(0) : w.mnew[rr];  // such a row is zeroed below
      }
      simd::exp_shifted_rows<T>(w.S.data(), Bk, nr, nc, w.shift.data(), w.sums.data());
      for (int64_t r = 0; r < nr; ++r) {
        const size_t rr = static_cast<size_t>(r);
        T* s = w.S.data() + r * Bk;
        T& m = st.m[rr];
        const T m_new = w.mnew[rr];
        if (m_new == kNegInf) {  // nothing with a finite score yet
          std::fill(s, s + nc, T(0));
          continue;
        }
        const T dm = m - m_new;
        const T alpha = dm == T(0) ? T(1) : exp0(dm);  // 0 on the first finite block (m = -inf)
        st.l[rr] = st.l[rr] * alpha + w.sums[rr];
        if (alpha != T(1))
          for (int64_t d = 0; d < p_.Dv; ++d) st.acc[static_cast<size_t>(r * dvp_ + d)] *= alpha;
        m = m_new;
        if (const uint8_t* keep = keep_row(p_, in_, b, head_of(h, i0 + r), query_of(i0 + r), j0))
          apply_keep(s, keep, nc, keep_scale_);
      }
      // acc += P·V over the keys that can carry weight: per group of rows its span union (the other keys weigh
      // exactly 0), or the whole block with a finite fill.
      for (int64_t g0 = 0; g0 < nr; g0 += kGroupRows) {
        const Span& g = w.groups[static_cast<size_t>(g0 / kGroupRows)];
        const int64_t v0 = finite ? j0 : std::max(c0, g.lo), v1 = finite ? j1 : std::min(c1, g.hi);
        if (v0 >= v1) continue;
        w.pan->pv(std::min(kGroupRows, nr - g0), v1 - v0, w.S.data() + g0 * Bk + (v0 - j0), Bk, v0,
                  st.acc.data() + g0 * dvp_, dvp_, true);
      }
      const int64_t v0 = finite ? j0 : c0, v1 = finite ? j1 : c1;
      w.pan->add_bad(w.S.data(), Bk, nr, j0, v0, v1, st.acc.data(), dvp_);
    }
  }

  // Each part's states, widened exactly, with the key range the part covers (the same for every task of part c).
  void expose(const std::vector<RowState<T>>& part, int64_t split, int64_t nqb, int64_t nkb) const {
    partials_->begin.clear(), partials_->end.clear(), partials_->states.clear();
    for (int64_t c = 0; c < split; ++c) {
      partials_->begin.push_back(c * nkb / split * bk_);
      partials_->end.push_back(std::min(p_.Lk, (c + 1) * nkb / split * bk_));
      State s = empty_state(p_.B, p_.Hq, p_.Lq, p_.Dv);
      for (int64_t t = 0; t < p_.B * p_.Hq * nqb; ++t) {
        const RowState<T>& st = part[static_cast<size_t>(t * split + c)];
        const int64_t bh = t / nqb, i0 = t % nqb * bq_, nr = std::min(bq_, p_.Lq - i0);
        for (int64_t r = 0; r < nr; ++r) {
          const size_t row = static_cast<size_t>(bh * p_.Lq + i0 + r), rr = static_cast<size_t>(r);
          if (!(st.l[rr] > 0)) continue;  // no visible key in the part: the empty state
          s.m[row] = static_cast<double>(st.m[rr]), s.l[row] = static_cast<double>(st.l[rr]);
          for (int64_t d = 0; d < p_.Dv; ++d)
            s.u[row * static_cast<size_t>(p_.Dv) + static_cast<size_t>(d)] =
                static_cast<double>(st.acc[rr * static_cast<size_t>(dvp_) + static_cast<size_t>(d)]);
        }
      }
      partials_->states.push_back(std::move(s));
    }
  }

  // Merge key-chunk states by their maxima (the lse merge) into out.
  void merge(const RowState<T>* part, int64_t n, int64_t nr, RowState<T>& out) const {
    out.reset(nr, dvp_);
    for (int64_t r = 0; r < nr; ++r) {
      const size_t rr = static_cast<size_t>(r);
      T m = kNegInf;
      for (int64_t c = 0; c < n; ++c) {
        m = std::max(m, part[c].m[rr]);
        out.mvis[rr] = std::max(out.mvis[rr], part[c].mvis[rr]);
      }
      out.m[rr] = m;
      if (m == kNegInf) continue;
      for (int64_t c = 0; c < n; ++c) {
        if (part[c].m[rr] == kNegInf) continue;
        const T f = exp0(part[c].m[rr] - m);
        out.l[rr] += part[c].l[rr] * f;
        for (int64_t d = 0; d < p_.Dv; ++d) out.acc[rr * dvp_ + d] += part[c].acc[rr * dvp_ + d] * f;
      }
    }
  }

  // Outputs of rows [i0, i0 + nr) from w.st: O = acc / l, lse = m + log l, or the fully-masked policy.
  void finish(int64_t b, int64_t h, int64_t i0, int64_t nr, Work& w) const {
    RowState<T>& st = w.st;
    w.o.resize(static_cast<size_t>(p_.Dv));
    const int64_t u = h;
    for (int64_t r = 0; r < nr; ++r) {
      const size_t rr = static_cast<size_t>(r);
      const int64_t h = head_of(u, i0 + r), i = query_of(i0 + r), row = (b * p_.Hq + h) * p_.Lq + i;
      const T sink = static_cast<T>(p_.sink(h));
      if (sink != kNegInf) {  // the sink: one more term of the denominator, without a value (rescale to its max)
        const T m_new = std::max(st.m[rr], sink), alpha = exp0(st.m[rr] - m_new);
        st.l[rr] = st.l[rr] * alpha + exp0(sink - m_new);
        if (alpha != T(1))
          for (int64_t d = 0; d < p_.Dv; ++d) st.acc[rr * dvp_ + d] *= alpha;
        st.m[rr] = m_new;
      }
      T lse;
      if (st.mvis[rr] == kNegInf && sink == kNegInf) {
        lse = pol_lse_;
        fully_masked_out(b, h, i, w.o.data());
      } else {
        for (int64_t d = 0; d < p_.Dv; ++d) w.o[static_cast<size_t>(d)] = st.acc[rr * dvp_ + d] / st.l[rr];
        lse = st.m[rr] + std::log(st.l[rr]);
      }
      store_row(out_.out, b, h, i, w.o.data());
      if (out_.lse) out_.lse->data<T>()[row] = lse;
      if (out_.max_logit)
        out_.max_logit->data<T>()[row] = st.mvis[rr] == kNegInf ? policy_max_logit<T>(p_) : st.mvis[rr];
    }
    if (out_.weights) weights_pass(b, u, i0, nr, w);  // never with packed heads: u is the head, i0 the query
    if (out_.scores) scores_pass(b, u, i0, nr, w);
  }

  // Raw-score output of rows [i0, i0 + nr): each key block recomputed; stages scaled/capped from every key's dot
  // product (the head's panels then cover all keys), stage masked after the scorer (masked keys = fill).
  void scores_pass(int64_t b, int64_t h, int64_t i0, int64_t nr, Work& w) const {
    T* base = out_.scores->data<T>() + ((b * p_.Hq + h) * p_.Lq + i0) * p_.Lk;  // (nr, Lk), contiguous
    load_q(b, h, i0, nr, w);
    spans(b, i0, nr, w);
    for (int64_t j0 = 0; j0 < p_.Lk; j0 += bk_) {
      const int64_t j1 = std::min(j0 + bk_, p_.Lk), nc = j1 - j0;
      if (raw_scores())
        dots(nr, j0, j0, j1, w);
      else
        scores(b, h, i0, nr, j0, nc, std::max(j0, w.ulo), std::min(j1, w.uhi), w, nullptr);
      for (int64_t r = 0; r < nr; ++r) {
        const T* s = w.S.data() + r * bk_;
        if (raw_scores())
          sc_.staged(s, base + r * p_.Lk + j0, nc, p_.scores_out);
        else
          std::copy(s, s + nc, base + r * p_.Lk + j0);
      }
    }
  }

  // The output of a row without a visible key: every key weighs policy_weight (NaN, 1/Lk or 0), dropout applies.
  void fully_masked_out(int64_t b, int64_t h, int64_t i, T* o) const {
    const int64_t Dv = p_.Dv;
    std::fill(o, o + Dv, T(0));
    if (p_.fully_masked == FullyMasked::zero) return;
    const uint8_t* keep = keep_row(p_, in_, b, h, i, 0);
    std::vector<T> v(static_cast<size_t>(bk_ * Dv));
    for (int64_t j0 = 0; j0 < p_.Lk; j0 += bk_) {
      const int64_t j1 = std::min(j0 + bk_, p_.Lk);
      load_kv_rows(p_, in_, 2, b, p_.kv_head(h), j0, j1, v.data());
      for (int64_t j = j0; j < j1; ++j) {
        const T wj = keep ? (keep[j] ? pol_w_ * keep_scale_ : T(0)) : pol_w_;
        if (wj == T(0)) continue;  // a dropped key contributes nothing, as in the reference
        for (int64_t d = 0; d < Dv; ++d) o[d] += wj * v[static_cast<size_t>((j - j0) * Dv + d)];
      }
    }
  }

  // Second pass for want_weights (keys never split then): recompute each score block, write exp(s - m) / l.
  void weights_pass(int64_t b, int64_t h, int64_t i0, int64_t nr, Work& w) const {
    T* base = out_.weights->data<T>() + ((b * p_.Hq + h) * p_.Lq + i0) * p_.Lk;  // (nr, Lk), contiguous
    load_q(b, h, i0, nr, w);
    spans(b, i0, nr, w);
    const bool no_sink = p_.sink(h) == -std::numeric_limits<double>::infinity();
    for (int64_t j0 = 0; j0 < p_.Lk; j0 += bk_) {
      const int64_t j1 = std::min(j0 + bk_, p_.Lk), nc = j1 - j0;
      const int64_t c0 = std::max(j0, w.ulo), c1 = std::min(j1, w.uhi);
      const bool skipped = c0 >= c1 && !sc_.finite_fill();
      if (!skipped) scores(b, h, i0, nr, j0, nc, c0, c1, w, nullptr);
      for (int64_t r = 0; r < nr; ++r) {
        const size_t rr = static_cast<size_t>(r);
        T* dst = base + r * p_.Lk + j0;
        if (w.st.mvis[rr] == kNegInf && no_sink) {
          std::fill(dst, dst + nc, pol_w_);
        } else if (skipped) {
          std::fill(dst, dst + nc, T(0));
        } else {
          exp_shifted(w.S.data() + r * bk_, dst, nc, w.st.m[rr]);
          for (int64_t j = 0; j < nc; ++j) dst[j] /= w.st.l[rr];
        }
      }
    }
  }

  KernelPartials* const partials_;
  const int64_t num_splits_;
  const Problem& p_;
  const Inputs& in_;
  Outputs& out_;
  const Scorer<T> sc_;
  const T keep_scale_, pol_w_, pol_lse_;
  const int64_t W_, dvp_;  // SIMD strip width; Dv padded to whole strips (the accumulator's row stride)
  int64_t bq_;             // rows per tile (cpu_impls.hpp; with packed heads, the unit's rows in equal blocks)
  const int64_t bk_;       // keys per tile
  int64_t pack_ = 1, units_ = 0, rows_ = 0;  // query heads per unit, units per batch, rows per unit
  const bool pairs_;                         // Q·Kᵀ on bf16 pairs where the panels have them (bf16_pairs_apply)
  const RopeStage rope_;          // rotary embedding of Q rows as they are loaded (K: in the panels, cpu_pack.hpp)
  std::vector<BlockKind> kinds_;  // the handed block mask per (b, h, tile row, tile column); empty: none
  int64_t nqb_ = 0, nkb_ = 0;
};

class FlashImpl final : public Impl {
 public:
  std::string name() const override { return "cpu-flash"; }
  std::string description() const override {
    return "fused online softmax over key blocks with packed K/V panels and runtime-dispatched SIMD (Highway); "
           "never forms Lq x Lk";
  }
  Capabilities capabilities() const override {
    return cpu_capabilities(
        "fp64 in double; fp32/fp16/bf16/fp8 in float, output rounded once; weights by a second pass");
  }
  // The same bits for any thread count and run after run (splits and tiles follow the problem, not the threads),
  // and in any layout or strides (rows are loaded into packed panels first). Its key split is a knob (num_splits:
  // whole key blocks per part, merged by their lse; within tolerance, not bitwise, as the merge rounds); its block
  // order is a constant of the problem's shape. Not batch-invariant: a row's bits depend on the allocated key length,
  // so a sequence padded to a longer neighbour differs from itself alone (docs/invariance.md;
  // tests/invariance/test_invariance.cpp).
  Declarations declarations() const override {
    Declarations d = p_exact_declarations(capabilities());
    d.deterministic = true;
    d.schedule_knobs = knob_threads | knob_num_splits;
    d.schedule_bitwise = knob_threads;
    d.layout_invariant = true;
    return d;
  }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    run_cpu(p, in, out, [](const Problem& q, const Inputs& x, Outputs& o) {
      if (q.dtype == DType::f64)
        Flash<double>(q, x, o).run();
      else
        Flash<float>(q, x, o).run();
    });
  }
  // Its split's states before the merge, for problems whose key ranges judge_partials can judge.
  Support supports_partials(const Problem& p) const override {
    if (Support s = supports(p); !s.ok) return s;
    if (p.want_weights || p.scores_out != ScoresOut::none)
      return Support::no("no key split with the weights or raw-score output (their second pass needs the whole row)");
    if (const std::string why = partials_unjudgeable(p); !why.empty()) return Support::no(why);
    return Support::yes();
  }
  void run_partials(const Problem& p, const Inputs& in, int64_t num_splits, KernelPartials& k) const override {
    Outputs out = make_outputs(p);
    run_cpu(p, in, out, [&](const Problem& q, const Inputs& x, Outputs& o) {
      if (q.dtype == DType::f64)
        Flash<double>(q, x, o, &k, num_splits).run();
      else
        Flash<float>(q, x, o, &k, num_splits).run();
    });
  }
};

}  // namespace

ImplPtr make_flash_impl() { return std::make_shared<FlashImpl>(); }

}  // namespace attncheck::cpu
