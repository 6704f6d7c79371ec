// attncheck CLI entry point. Exit codes: 0 pass, 1 verification failure, 2 usage or input error.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

using namespace attncheck;

namespace {

// A small built-in problem with signed values, GQA, Lq != Lk and a bottom-right causal mask.
void demo_case(Problem& p, Inputs& in) {
  p.B = 2; p.Hq = 4; p.Hkv = 2; p.Lq = 7; p.Lk = 13; p.Dqk = 16; p.Dv = 12;
  p.causal = true; p.alignment = Alignment::bottom_right; p.want_lse = true;
  in.q = make_qkv(p, 0); in.k = make_qkv(p, 1); in.v = make_qkv(p, 2);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  auto rnd = [&] { s = s * 6364136223846793005ull + 1442695040888963407ull; return ((s >> 11) * 0x1.0p-53) * 2 - 1; };
  for (Tensor* t : {&in.q, &in.k, &in.v})
    for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, rnd());
}

int cmd_list() {
  for (const auto& impl : registry()) {
    const Support a = impl->available();
    std::printf("%-16s %-12s %s\n", impl->name().c_str(), a.ok ? "available" : "unavailable",
                a.ok ? impl->description().c_str() : a.reason.c_str());
  }
  return 0;
}

int cmd_verify_demo(const std::vector<std::string>& names) {
  Problem p; Inputs in; demo_case(p, in);
  const ReferenceResult ref = reference_attention(p, in);
  int failures = 0;
  std::printf("demo case %s\n", p.name().c_str());
  for (const auto& impl : registry()) {
    if (!names.empty() && names[0] != "all" && std::find(names.begin(), names.end(), impl->name()) == names.end())
      continue;
    Outputs out;
    const Support s = run_impl(*impl, p, in, out);
    if (!s.ok) { std::printf("  %-16s UNSUPPORTED  %s\n", impl->name().c_str(), s.reason.c_str()); continue; }
    const Verdict v = judge(p, ref, out);
    failures += !v.pass;
    std::printf("  %-16s %-12s %s\n", impl->name().c_str(), v.pass ? "PASS" : "FAIL", v.worst().describe().c_str());
  }
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attncheck: verify scaled dot-product attention implementations against a looped reference"};
  app.require_subcommand(1);
  auto* list = app.add_subcommand("list", "List implementations, their availability and capabilities");
  auto* verify = app.add_subcommand("verify", "Verify implementations (built-in demo case until fixtures exist)");
  std::vector<std::string> impls;
  verify->add_option("--impl", impls, "Implementation names, or all");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (*list) return cmd_list();
    if (*verify) return cmd_verify_demo(impls);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attncheck: error: %s\n", e.what());
    return 2;
  }
  return 2;
}
