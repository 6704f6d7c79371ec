// Hypotheses about score and mask modifications (mods.hpp) and the block-sparse masks a kernel derives from them
// (block_mask.hpp). A modification left out is the reference with its parameters at their defaults; ALiBi's sign
// and head are the reference with the slopes the bug reads. A boundary or block bug changes which keys a query
// sees: its prediction is the reference with every mask replaced by one boolean mask of the keys the bug lets
// through, judged under that case's own tolerance.
#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "attncheck/block_mask.hpp"
#include "attncheck/features.hpp"
#include "derive.hpp"
#include "hypotheses.hpp"

namespace attncheck::diagnose {

namespace {

// Single blocks tried one by one, at most this many per hypothesis (each costs a reference run of the problem).
constexpr size_t kMaxSingleBlocks = 24;
// Problems with more multiply-adds in P.V than this get the whole-mask block hypotheses only.
constexpr int64_t kMaxBlockWork = int64_t(1) << 22;

// Whether the keys the bug lets through differ from the reference's in a row that fails (out, lse or weights): a
// bug that changes only rows the candidate got right explains nothing, and its prediction costs a reference run.
bool touches_a_failing_row(const Subject& s, const Sees& sees) {
  const Problem& p = s.p();
  auto any = [](const std::vector<char>& bad, size_t from, size_t n) {
    return from + n <= bad.size() && std::find(bad.begin() + from, bad.begin() + from + n, 1) != bad.begin() + from + n;
  };
  for (int64_t r = 0; r < s.rows(); ++r) {
    const size_t row = static_cast<size_t>(r);
    if (!any(s.bad_out, row * size_t(p.Dv), size_t(p.Dv)) && !any(s.bad_lse, row, 1) &&
        !any(s.bad_w, row * size_t(p.Lk), size_t(p.Lk)))
      continue;
    for (int64_t j = 0; j < p.Lk; ++j) {
      const bool vis = s.vis[static_cast<size_t>(r * p.Lk + j)] != 0;
      if (sees(r / (p.Hq * p.Lq), r / p.Lq % p.Hq, r % p.Lq, j, vis) != vis) return true;
    }
  }
  return false;
}

// ALiBi (mods_library.cpp): the slopes negated (the bias added, +slope * |pos - j|), and slopes read for another
// head: the neighbouring head either way, the heads in reverse order, the KV head's index.
void alibi_hypotheses(Scorer& sc, const prop::Case& c) {
  const Problem& p = c.p;
  sc.variant("alibi-sign", "ALiBi bias added with the wrong sign (+slope * |pos - j|)", [&] {
    return with_problem(c, [](Problem& q) {
      for (double& x : q.alibi_slopes) x = -x;
    });
  });
  const int64_t H = p.Hq, rows = static_cast<int64_t>(p.alibi_slopes.size()) / H;
  auto remap = [&](const std::string& what, const std::function<int64_t(int64_t)>& head) {
    sc.variant("alibi-slope-head", "ALiBi slope of " + what, [&] {
      return with_problem(c, [&](Problem& q) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t h = 0; h < H; ++h)
            q.alibi_slopes[static_cast<size_t>(r * H + h)] = p.alibi_slopes[static_cast<size_t>(r * H + head(h))];
      });
    });
  };
  if (H < 2) return;
  remap("the next query head (h + 1)", [&](int64_t h) { return (h + 1) % H; });
  if (H > 2) remap("the previous query head (h - 1)", [&](int64_t h) { return (h + H - 1) % H; });
  remap("the heads in reverse order (H - 1 - h)", [&](int64_t h) { return H - 1 - h; });
  if (p.Hkv < H)
    remap("the KV head's index (h / group) instead of the query head's", [&](int64_t h) { return p.kv_head(h); });
  if (rows > 1)
    sc.variant("alibi-slope-head", "ALiBi slopes of batch 0 for every batch ([B, Hq] read as [Hq])", [&] {
      return with_problem(c, [&](Problem& q) {
        for (int64_t r = 1; r < rows; ++r) std::copy_n(p.alibi_slopes.begin(), H, q.alibi_slopes.begin() + r * H);
      });
    });
}

// A mask modification whose key (or query position) is read one token off: the other masks unchanged, this
// entry's predicate evaluated at the shifted index (clamped to the keys, as a kernel reading a shifted array
// within its bounds).
void boundary_hypotheses(Scorer& sc, const ModEntry& e, const std::string& tag, const std::string& noun) {
  const Subject& s = sc.s;
  const Problem& p = s.p();
  Problem rest = p;  // every mask but this entry
  reset_modification(rest, e);
  std::vector<char> others(s.vis.size());
  const DenseMask dense(rest, s.c.in);
  for (int64_t r = 0; r < s.rows(); ++r)
    dense.row(r / (p.Hq * p.Lq), r / p.Lq % p.Hq, r % p.Lq, &others[static_cast<size_t>(r * p.Lk)]);
  for (const bool key : {true, false})
    for (const int delta : {+1, -1}) {
      const std::string what = std::string("the ") + (key ? "key's " : "query's ") + noun + " read one token to the " +
                               (delta > 0 ? "right" : "left");
      add_visibility(sc, tag, what, [&](int64_t b, int64_t h, int64_t i, int64_t j, bool) {
        if (!others[static_cast<size_t>(((b * p.Hq + h) * p.Lq + i) * p.Lk + j)]) return false;
        const int64_t pos = p.row_keys(b, i).diag;
        ModAt at{b, h, i, pos, j};
        if (key)
          at.j = std::clamp<int64_t>(j + delta, 0, p.Lk - 1);
        else
          at.pos = pos + delta;
        return e.visible(p, at);
      });
    }
}

// Blocks of the exact block mask (FlexAttention's 128 x 128 default, and 64 x 64) read wrongly: partial blocks
// treated as full (their mask skipped: every key of the block seen), or blocks never read (the full list, the
// partial list, or one block left out), each whole-mask form and then single blocks one by one.
void block_hypotheses(Scorer& sc) {
  const Subject& s = sc.s;
  const Problem& p = s.p();
  // Single blocks where the block mask is data (mask modifications), on problems small enough to try them all.
  const bool singles = ModSet(p).has_mask() && p.B * p.Hq * p.Lq * p.Lk * p.Dv <= kMaxBlockWork;
  for (const int64_t bs : {int64_t{128}, int64_t{64}}) {
    if (bs == 64 && p.Lq <= 64 && p.Lk <= 64) continue;  // one block at either size
    std::vector<BlockKind> kinds;
    try {
      kinds = block_kinds(derive_block_mask(p, s.c.in, bs, bs), p);
    } catch (const std::invalid_argument&) {
      continue;
    }
    const int64_t QB = blocks_of(p.Lq, bs), KB = blocks_of(p.Lk, bs);
    auto kind = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
      return kinds[static_cast<size_t>(((b * p.Hq + h) * QB + i / bs) * KB + j / bs)];
    };
    // The blocks (query block, key block) that are partial, and non-empty, in some batch and head.
    std::set<std::pair<int64_t, int64_t>> partial, nonempty;
    for (size_t n = 0; n < kinds.size(); ++n) {
      const std::pair<int64_t, int64_t> qk{static_cast<int64_t>(n / size_t(KB)) % QB,
                                           static_cast<int64_t>(n % size_t(KB))};
      if (kinds[n] == BlockKind::partial) partial.insert(qk);
      if (kinds[n] != BlockKind::empty) nonempty.insert(qk);
    }
    if (partial.empty()) continue;  // no mask at this block size: every block is full or empty
    const std::string at = " (" + std::to_string(bs) + " x " + std::to_string(bs) + " blocks)";
    auto block_name = [&](std::pair<int64_t, int64_t> qk) {
      return "query block " + std::to_string(qk.first) + ", key block " + std::to_string(qk.second) + at;
    };
    auto in = [&](std::pair<int64_t, int64_t> qk, int64_t i, int64_t j) {
      return i / bs == qk.first && j / bs == qk.second;
    };
    add_visibility(sc, "block-mask-partial-as-full", "every partial block treated as full" + at,
                   [&](int64_t b, int64_t h, int64_t i, int64_t j, bool vis) {
                     return vis || kind(b, h, i, j) == BlockKind::partial;
                   });
    add_visibility(sc, "block-mask-missing", "the full blocks never read (only the partial list)" + at,
                   [&](int64_t b, int64_t h, int64_t i, int64_t j, bool vis) {
                     return vis && kind(b, h, i, j) != BlockKind::full;
                   });
    add_visibility(sc, "block-mask-missing", "the partial blocks never read (only the full list)" + at,
                   [&](int64_t b, int64_t h, int64_t i, int64_t j, bool vis) {
                     return vis && kind(b, h, i, j) != BlockKind::partial;
                   });
    if (!singles) continue;
    size_t tried = 0;
    for (const auto& qk : partial) {
      if (++tried > kMaxSingleBlocks) break;
      add_visibility(sc, "block-mask-partial-as-full", block_name(qk) + " treated as full where it is partial",
                     [&](int64_t b, int64_t h, int64_t i, int64_t j, bool vis) {
                       return vis || (in(qk, i, j) && kind(b, h, i, j) == BlockKind::partial);
                     });
    }
    tried = 0;
    for (const auto& qk : nonempty) {
      if (++tried > kMaxSingleBlocks) break;
      add_visibility(sc, "block-mask-missing", block_name(qk) + " never read",
                     [&](int64_t, int64_t, int64_t i, int64_t j, bool vis) { return vis && !in(qk, i, j); });
    }
  }
}

}  // namespace

void add_visibility(Scorer& sc, const std::string& tag, const std::string& what, const Sees& sees) {
  if (touches_a_failing_row(sc.s, sees)) sc.judged_variant(tag, what, [&] { return with_mask(sc.s.c, sees); });
}

void modification_hypotheses(Scorer& sc) {
  const Subject& s = sc.s;
  const prop::Case& c = s.c;
  for (const ModEntry* e : used_modifications(c.p)) {
    if (e->kind == ModKind::position) continue;  // RoPE and QK-norm have their own hypotheses
    sc.variant("parameter-ignored", std::string("modification ") + e->name + " ignored (its parameters unused)",
               [&] { return with_problem(c, [&](Problem& q) { reset_modification(q, *e); }); });
    const std::string name = e->name;
    if (name == "alibi") alibi_hypotheses(sc, c);
    if (name == "document") boundary_hypotheses(sc, *e, "document-boundary", "document id");
    if (name == "chunked") boundary_hypotheses(sc, *e, "chunk-boundary", "chunk");
  }
  // Every mask has a block mask (FlexAttention's causal and windows are mask_mods too): a problem without partial
  // blocks gets no block hypothesis.
  block_hypotheses(sc);
}

}  // namespace attncheck::diagnose
