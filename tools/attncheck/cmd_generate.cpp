// `attncheck generate --spec golden/suite.json --out golden [--update] [--filter GLOB]`: rebuilds the golden suite
// (or the cases whose name or file name matches GLOB) from its spec, byte-identically (regenerate.hpp). Each file is
// built in memory and written durably (durable_file.hpp); an existing file whose bytes would change is left alone
// unless --update, and what changed is printed numerically (max |diff| of expected out).
#include <cstdio>
#include <stdexcept>

#include "attncheck/regenerate.hpp"
#include "attncheck/state_suite.hpp"
#include "command.hpp"
#include "report.hpp"
#include "shard.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  std::string spec, out = "golden", filter;
  bool update = false;
  std::optional<std::string> shard;
};
Options g;

// Sharded (--shard I/N), case k of the spec's selected cases is built by shard k mod N: the N runs write disjoint
// files, into one --out or into N that are copied together; there is no report to merge.
int run_generate() {
  const std::optional<Shard> shard = resolve_shard(g.shard);
  RegenerateOptions o;
  o.out = g.out, o.update = g.update, o.filter = g.filter;
  RegenerateCounts n;
  if (is_merge_suite(g.spec)) {  // docs/states.md
    if (shard)
      throw std::invalid_argument("--shard: a merge-state suite (" + g.spec + ") is one short run, not sharded");
    o.on_line = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
    n = regenerate_merge_suite(g.spec, o);
  } else {
    const SuiteSpec spec = read_suite(g.spec);
    Progress progress(spec.cases.size());
    if (shard) o.builds = [&](size_t k) { return shard->owns(k); };
    o.on_case = [&](const std::string& name) { progress.step(name); };
    o.on_line = [&](const std::string& line) {
      progress.clear();
      std::printf("%s\n", line.c_str());
    };
    n = regenerate_suite(spec, o);
    progress.clear();
    if (shard) announce_shard(*shard, n.built, ("of " + std::to_string(n.selected) + " cases built").c_str());
  }
  std::printf("%zu cases in %s: %d new, %d unchanged, %d updated, %d differ\n", n.built, n.dir.c_str(), n.created,
              n.same, n.updated, n.differ);
  return n.differ ? 1 : 0;
}

const Register reg{
    {"generate", "Build golden fixtures from a suite spec (byte-identical)", [](CLI::App& sub) {
       sub.add_option("--spec", g.spec, "Suite spec (golden/suite.json)")->required();
       sub.add_option("--out", g.out, "Output directory; fixtures go to OUT/<spec subdir>/")->capture_default_str();
       sub.add_flag("--update", g.update, "Overwrite existing fixtures whose bytes change");
       sub.add_option("--filter", g.filter,
                      "Only the cases whose name or file name matches this glob (e.g. 'fp16_*causal*')");
       add_shard_option(sub, g.shard);
       return std::function<int()>(run_generate);
     }}};

}  // namespace
}  // namespace attncheck::cli
