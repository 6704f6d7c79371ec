// `attncheck merge SHARD.json... [--report FILE]`: the N JSON reports of a sharded run (`--shard I/N` of verify,
// property, power, selftest) joined into the report the unsharded run writes, with its exit code; each verb
// registers how its rows merge (register_merge in its cmd_*.cpp). The joining is harness/verify/merge_reports.hpp;
// this file parses the options and writes the report.
#include <cstdio>

#include "command.hpp"
#include "report.hpp"
#include "shard.hpp"

namespace attncheck::cli {
namespace {

std::vector<std::string> g_files;
std::string g_report;

int run_merge() {
  const verify::MergedReport r = verify::merge_reports(g_files, mergers());
  if (g_report.empty())
    std::fputs(r.text.c_str(), stdout);
  else
    write_report_file(g_report, r.text);
  std::fprintf(stderr, "attncheck: merged %zu shards of %s: exit %d\n", r.shards, r.verb.c_str(), r.exit_code);
  return r.exit_code;
}

const Register reg{
    {"merge", "Join the JSON reports of a sharded run into the unsharded run's report and exit code",
     [](CLI::App& sub) {
       sub.add_option("reports", g_files, "The shards' JSON reports (every shard of one run)")->required();
       sub.add_option("--report", g_report, "Write the merged report here (default: stdout)");
       return std::function<int()>(run_merge);
     }}};

}  // namespace
}  // namespace attncheck::cli
