// `attncheck compare-module --expected CASE.h5 --actual Y.npz`: a module's outputs (y, weights, and gradients dx,
// dwq, ... given next to y) judged against a module fixture (`import --module`); the judging is
// harness/verify/compare_module.hpp, this file parses the options and prints the rows. docs/module.md.
#include <cstdio>

#include "command.hpp"
#include "compare_module.hpp"
#include "report.hpp"

namespace attncheck::cli {
namespace {

std::string g_expected, g_actual, g_report;

int run_compare_module() {
  bool first = true;
  const verify::ModuleCompared c = verify::compare_module(
      g_expected, g_actual, [](const std::string& n) { std::printf("note: %s\n", n.c_str()); },
      [&](const CaseResult& row, const std::string& diagnosis) {
        if (first) print_header();
        first = false;
        print_row(row);
        if (!diagnosis.empty()) std::printf("    %s\n", diagnosis.c_str());
      });
  if (!g_report.empty()) write_report(g_report, c.rows);
  return c.pass ? 0 : 1;
}

const Register reg{
    {"compare-module", "Judge a module's outputs (y, weights, gradients in an .npz) against a module fixture",
     [](CLI::App& sub) {
       sub.add_option("--expected", g_expected, "Module fixture (.h5)")->required();
       sub.add_option("--actual", g_actual, "Candidate .npz with y [B,Lq,d_out] (and weights, dx, dwq, ...)")
           ->required();
       sub.add_option("--report", g_report, "Write a report: FILE.json or FILE.xml (JUnit)");
       return std::function<int()>(run_compare_module);
     }}};

}  // namespace
}  // namespace attncheck::cli
