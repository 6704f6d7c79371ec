// `attncheck import TENSORS.npz|.h5 --out CASE.h5 [--causal bottom-right --scale S --window L,R --policy P ...]`:
// a fixture from a user's own tensors; `--module`: a module fixture from x, weights and flags (the reading, the
// problem and the reference: golden's attncheck/user_import.hpp). `verify` replays the result.
// `--judge`: the file also holds a candidate's outputs (out [, lse, weights]), judged as `compare` judges them
// (harness/verify/compare.hpp), with or without a fixture written: one step and no file, the Python package's
// route for a single check. TENSORS `-` reads an .npz from stdin. This file parses the options and prints.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "attncheck/features.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/user_import.hpp"
#include "candidate_rows.hpp"
#include "command.hpp"
#include "compare.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  ImportRequest r;
  std::string report;
  ModuleImportFlags module;  // --module: a module fixture from x, weights and flags
  bool is_module = false;
};
Options g;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

void print_note(const std::string& n) { std::printf("note: %s\n", n.c_str()); }

int run_module_import() {
  if (g.r.judge || !g.report.empty())
    bad("--judge: not for --module (a module's outputs are judged by compare-module)");
  if (g.r.out.empty()) bad("--out: needed (the module fixture to write)");
  const ModuleFixture f = import_module_case(g.r, g.module);
  std::printf("imported module %s -> %s (%s)\n", g.r.input.c_str(), g.r.out.c_str(), f.name.c_str());
  return 0;
}

int run_import() {
  if (g.is_module) return run_module_import();
  check_import_request(g.r);
  if (!g.report.empty() && !g.r.judge) bad("--report: only with --judge (a report of the judged outputs)");
  if (!g.report.empty()) check_report_path(g.report);
  const ImportedCase c = import_case(g.r, print_note);
  if (!g.r.out.empty())
    std::printf("imported %s -> %s (%s)\nreplay: attncheck verify --fixtures %s --impl NAME\n", c.source.c_str(),
                g.r.out.c_str(), c.fixture.name.c_str(), std::filesystem::path(g.r.out).parent_path().string().c_str());
  if (!g.r.judge) return 0;
  verify::CandidateJudging judged;
  std::vector<CaseResult> rows{verify::judge_candidate_outputs(
      c.fixture, g.r.out.empty() ? c.source : g.r.out, c.source, c.source, c.candidate, "", judged, print_note)};
  describe_problem(rows[0], c.fixture.problem);
  print_rows(rows, {});
  if (!g.report.empty()) write_report(g.report, rows);
  return exit_code(rows);
}

const Register reg{
    {"import",
     "Make a fixture from your own tensors (.npz or .h5 with q, k, v [, mask, bias, keep, past_key, past_value])",
     [](CLI::App& sub) {
       sub.add_option("input", g.r.input,
                      "Tensors: .npz (np.savez[_compressed]) or .h5 (h5py); - reads an "
                      ".npz from stdin")
           ->required();
       sub.add_option("--out", g.r.out, "Fixture to write (.h5); optional with --judge");
       sub.add_flag("--judge", g.r.judge,
                    "Judge the file's own outputs (out [, lse, weights]; an .h5's "
                    "/actual/out ...) against the reference, as compare does: exit 0 pass, 1 fail");
       sub.add_option("--report", g.report, "With --judge: write a report, FILE.json or FILE.xml (JUnit)");
       sub.add_option("--tolerances", g.r.tolerances,
                      "Also write the per-element tolerances as DIR/out.npy, "
                      "lse.npy [, weights.npy, max_logit.npy] (logical [B,H,L,...] order)");
       sub.add_option("--name", g.r.name, "Case name (default: from the problem)");
       sub.add_option("--dtype", g.r.dtype,
                      "Problem dtype (default: q's; bf16 from uint16 bit patterns, "
                      "fp8_e4m3/fp8_e5m2 from uint8 codes)");
       sub.add_option("--descale-q", g.r.descale_q, "fp8: q's values are descale_q * code (default 1)");
       sub.add_option("--descale-k", g.r.descale_k, "fp8: k's (and past_key's) descale (default 1)");
       sub.add_option("--descale-v", g.r.descale_v, "fp8: v's (and past_value's) descale (default 1)");
       sub.add_option("--layout", g.r.layout, "Memory order of q, k, v: bhsd or bshd")->capture_default_str();
       sub.add_option("--causal", g.r.causal, "Causal mask aligned top-left or bottom-right");
       sub.add_option("--causal-offset", g.r.causal_offset, "Causal/window diagonal offset (explicit)");
       sub.add_option("--scale", g.r.scale, "Softmax scale (default 1/sqrt(Dqk))");
       for (const ModEntry& m : logit_modifications())  // the logit stage's parameters, a flag each (--key-name)
         for (const Field& f : m.fields) {
           std::string flag = std::string("--") + f.key;
           std::replace(flag.begin(), flag.end(), '_', '-');
           sub.add_option(flag, g.r.logit[f.key], std::string(f.doc) + " (" + f.rule + ")");
         }
       sub.add_option("--window", g.r.window, "Sliding window LEFT,RIGHT")->delimiter(',');
       sub.add_option("--key-lengths", g.r.key_lengths, "Valid keys per batch")->delimiter(',');
       sub.add_option("--policy", g.r.policy, "Fully-masked rows: zero, nan, uniform")->capture_default_str();
       sub.add_option("--fill-value", g.r.fill_value, "Masked scores become this finite value (default -inf)");
       sub.add_option("--dropout-p", g.r.dropout_p, "Dropout probability of the keep array");
       sub.add_option("--dropout-seed", g.r.dropout_seed, "Recorded with the keep array");
       sub.add_option("--score-mod", g.r.score_mod,
                      "Score modification: an expression over score, b, h, q_idx, "
                      "kv_idx, q_pos and --aux tensors, e.g. 'score + slopes[h] * (kv_idx - q_pos)' "
                      "(docs/problem-model.md \"Expressions\")");
       sub.add_option("--mask-mod", g.r.mask_mod,
                      "Mask modification: an expression over b, h, q_idx, kv_idx, q_pos "
                      "and --aux tensors, nonzero = visible, e.g. 'doc[b, q_idx] == doc[b, kv_idx]'");
       sub.add_option("--aux", g.r.aux, "Arrays of the input file that the expressions index, by name")->delimiter(',');
       sub.add_flag("--want-lse", g.r.want_lse, "Ask implementations for lse");
       sub.add_flag("--want-weights", g.r.want_weights, "Ask for (and store) the attention weights");
       sub.add_option("--scores-out", g.r.scores_out,
                      "Also expect the raw scores [B,Hq,Lq,Lk]: scaled, capped "
                      "(after the logit stage) or masked (the softmax input); ONNX qk_matmul_output_mode 0, 1, 2");
       sub.add_option("--max-logit", g.r.max_logit,
                      "Also expect the max-logit output: rows [B,Hq,Lq] or "
                      "heads [Hq] (the row max of the softmax input; TransformerEngine's return_max_logit)");
       sub.add_flag("--module", g.is_module,
                    "A module fixture from x [, x2], weights and flags "
                    "(docs/module.md): needs --heads");
       sub.add_option("--heads", g.module.heads, "--module: query heads");
       sub.add_option("--kv-heads", g.module.kv_heads, "--module: KV heads (default: --heads)");
       sub.add_option("--packing", g.module.packing, "--module: packed (default) or interleaved, for wqkv");
       sub.add_flag("--average-weights", g.module.average_weights, "--module: weights averaged over heads");
       return std::function<int()>(run_import);
     }}};

}  // namespace
}  // namespace attncheck::cli
