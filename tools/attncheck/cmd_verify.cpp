// `attncheck verify`: replays cases against implementations (a built-in demo case until fixtures exist).
#include <algorithm>
#include <cstdio>

#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "command.hpp"

namespace attncheck::cli {
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

int run_verify(const std::vector<std::string>& names) {
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

std::vector<std::string> g_impls;
const Register reg{{"verify", "Verify implementations against the reference", [](CLI::App& sub) {
                      sub.add_option("--impl", g_impls, "Implementation names, or all");
                      return std::function<int()>([] { return run_verify(g_impls); });
                    }}};

}  // namespace
}  // namespace attncheck::cli
