// --max-memory and --max-work (attncheck/budget.hpp) on every subcommand that reads fixtures, candidates, specs or
// user arrays; the process budget they set is what the readers check before allocating or computing. --read-timeout
// bounds each HDF5 read (set_read_time_limit, attncheck/fixture.hpp).
#include <cstdio>
#include <set>
#include <string>

#include "attncheck/budget.hpp"
#include "attncheck/fixture.hpp"
#include "command.hpp"

namespace attncheck::cli {
namespace {

std::string g_max_memory, g_max_work;
double g_read_timeout = 0;

}  // namespace

void add_budget_options(CLI::App& sub) {
  static const std::set<std::string> reads_files = {"compare", "generate", "import", "inspect", "verify"};
  if (!reads_files.count(sub.get_name())) return;
  const Budget m = machine_budget();
  char work[32];
  std::snprintf(work, sizeof work, "%.3g", m.max_flops);
  sub.add_option("--max-memory", g_max_memory,
                 "Refuse a case whose tensors need more memory than this, in bytes or with K/M/G/T (default half "
                 "the physical memory: " +
                     std::to_string(m.max_bytes >> 20) + "M)");
  sub.add_option("--max-work", g_max_work,
                 "Refuse a case whose reference needs more FLOPs than this, e.g. 1e13 or 50T (default " +
                     std::string(work) + ": about 1000 s of the reference on the default threads)");
  sub.add_option("--read-timeout", g_read_timeout,
                 "Seconds one HDF5 file may take to read in the separate reading process before it is killed and "
                 "the file reported as damaged (default 5 s plus 1 s per 100 MB)")
      ->check(CLI::PositiveNumber);
}

void apply_budget_options() {
  Budget b = machine_budget();
  if (!g_max_memory.empty()) b.max_bytes = parse_bytes("--max-memory", g_max_memory);
  if (!g_max_work.empty()) b.max_flops = parse_flops("--max-work", g_max_work);
  set_budget(b);
  set_read_time_limit(g_read_timeout);
}

}  // namespace attncheck::cli
