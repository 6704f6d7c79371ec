// `attncheck block-mask --expected FIXTURE.h5|--problem NAME [--actual BLOCKMASK.npz] [--q-block N --kv-block N]
// [--write OUT.npz]`: the exact block-sparse mask of a fixture's problem (FlexAttention's BlockMask convention,
// docs/block-mask.md), printed as a grid per (batch, head) or written as an .npz, and a candidate's block mask judged
// against it. Exit 0 pass (notes shown), 1 a failure (each naming the block), 2 bad input (an inconsistent block mask
// names the field and the values).
#include <cstdio>

#include "attncheck/block_mask_file.hpp"
#include "attncheck/fixture.hpp"
#include "command.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  std::string expected, problem, actual, write;
  int64_t q_block = 128, kv_block = 128;
  bool sizes_given = false;
  int show = 20;
};
Options g;

// One line per query block: F full, P partial, . empty, one letter per key block.
void print_grid(const BlockMask& m, const Problem& p) {
  const std::vector<BlockKind> k = block_kinds(m, p);
  const int64_t nq = blocks_of(p.Lq, m.q_block), nk = blocks_of(p.Lk, m.kv_block);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      std::printf("b=%lld h=%lld\n", static_cast<long long>(b), static_cast<long long>(h));
      for (int64_t q = 0; q < nq; ++q) {
        std::string line = "  ";
        for (int64_t c = 0; c < nk; ++c) {
          const BlockKind x = k[static_cast<size_t>(((b * p.Hq + h) * nq + q) * nk + c)];
          line += x == BlockKind::full ? 'F' : x == BlockKind::partial ? 'P' : '.';
        }
        std::printf("%s\n", line.c_str());
      }
    }
}

void print_findings(const char* tag, const std::vector<BlockFinding>& f) {
  for (size_t i = 0; i < f.size() && static_cast<int>(i) < g.show; ++i)
    std::printf("%s %s\n", tag, f[i].describe().c_str());
  if (static_cast<int>(f.size()) > g.show)
    std::printf("%s ... and %zu more\n", tag, f.size() - static_cast<size_t>(g.show));
}

// The problem and its inputs: a fixture's, or a problem's lossless name (no tensors: a boolean mask needs the fixture).
Fixture source() {
  if (g.expected.empty() == g.problem.empty())
    throw std::invalid_argument("block-mask: give one of --expected and --problem");
  if (!g.expected.empty()) return read_fixture(g.expected);
  Fixture f;
  f.problem = parse_name(g.problem);
  f.name = g.problem;
  if (f.problem.mask_shape)
    throw std::invalid_argument("--problem: " + g.problem +
                                " has a boolean mask tensor; give the fixture (--expected)");
  return f;
}

int run_block_mask() {
  const Fixture f = source();
  const Problem& p = f.problem;
  if (g.actual.empty()) {
    const BlockMask m = derive_block_mask(p, f.inputs, g.q_block, g.kv_block);
    if (!g.write.empty()) {
      write_block_mask_npz(g.write, m);
      std::printf("wrote %s\n", g.write.c_str());
    } else {
      std::printf("block mask of %s, q_block %lld, kv_block %lld (F full, P partial, . empty):\n", f.name.c_str(),
                  static_cast<long long>(m.q_block), static_cast<long long>(m.kv_block));
      print_grid(m, p);
    }
    return 0;
  }
  std::optional<std::pair<int64_t, int64_t>> sizes;
  if (g.sizes_given) sizes = std::pair<int64_t, int64_t>{g.q_block, g.kv_block};
  const BlockMask cand = read_block_mask(g.actual, sizes);
  BlockMaskVerdict v;
  try {
    v = judge_block_mask(p, f.inputs, cand);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(g.actual + ": " + e.what());
  }
  print_findings("FAIL", v.failures);
  print_findings("note:", v.notes);
  std::printf("%s: block mask of %s (q_block %lld, kv_block %lld): %s, %zu failures, %zu notes\n", g.actual.c_str(),
              f.name.c_str(), static_cast<long long>(cand.q_block), static_cast<long long>(cand.kv_block),
              v.pass() ? "pass" : "FAIL", v.failures.size(), v.notes.size());
  return v.pass() ? 0 : 1;
}

const Register reg{
    {"block-mask", "The exact block-sparse mask of a fixture (FlexAttention BlockMask); judge a candidate's",
     [](CLI::App& sub) {
       sub.add_option("--expected", g.expected, "Golden fixture (.h5)");
       sub.add_option("--problem", g.problem,
                      "Instead of a fixture: a problem's lossless name (Problem::name(); no boolean mask tensor)");
       sub.add_option("--actual", g.actual,
                      "A candidate block mask: .npz or .h5 with kv_num_blocks, kv_indices [, "
                      "full_kv_num_blocks, full_kv_indices] [, block_size] (docs/block-mask.md)");
       sub.add_option("--write", g.write, "Write the exact block mask as an .npz (without --actual)");
       auto* q = sub.add_option("--q-block", g.q_block, "Query rows per block (default 128)");
       auto* k = sub.add_option("--kv-block", g.kv_block, "Keys per block (default 128)");
       sub.add_option("--show", g.show, "Failures and notes printed at most (default 20)")
           ->check(CLI::Range(0, 1000000));
       return std::function<int()>([q, k] {
         g.sizes_given = q->count() > 0 || k->count() > 0;
         if (!g.write.empty() && !g.actual.empty())
           throw std::invalid_argument("--write: writes the exact block mask; not with --actual");
         return run_block_mask();
       });
     }}};

}  // namespace
}  // namespace attncheck::cli
