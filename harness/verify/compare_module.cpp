// `attncheck compare-module`'s judging (see compare_module.hpp).
#include "compare_module.hpp"

#include <cmath>
#include <stdexcept>

#include "attncheck/budget.hpp"
#include "attncheck/module_fixture.hpp"
#include "attncheck/module_tolerance.hpp"
#include "attncheck/user_arrays.hpp"
#include "module_check.hpp"

namespace attncheck::verify {
namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

// "diagnosis: TAG TAG", or `none` in place of the tags when no fault explains the failure.
std::string diagnosis_line(const std::vector<std::string>& tags, const char* none) {
  std::string line;
  for (const std::string& t : tags) line += (line.empty() ? "" : " ") + t;
  return "diagnosis: " + (line.empty() ? std::string(none) : line);
}

}  // namespace

// compare-module: y (and weights when the fixture has them) from an .npz, in any float dtype (bf16: uint16 bits).
ModuleCompared compare_module(const std::string& expected, const std::string& actual, const NoteSink& note,
                              const ModuleRowSink& on_row) {
  const ModuleFixture f = read_module_fixture(expected);
  const ModuleProblem& m = f.problem;
  const auto a = read_npz(actual, budget().max_bytes);
  ModuleOutputs out = make_module_outputs(m);
  DType weights_delivered = DType::f64;
  auto fill = [&](const char* name, Tensor& t) {
    const auto it = a.find(name);
    if (it == a.end()) bad(actual + ": no array '" + std::string(name) + "'");
    const std::vector<int64_t> want = t.shape;
    std::vector<int64_t> got = it->second.shape;
    if (m.average_weights && std::string(name) == "weights" && got.size() == 3) got.insert(got.begin() + 1, 1);
    if (std::string(name) == "y" && got.size() == 3) got = {got[0], got[1], got[2]};
    if (t.numel() != int64_t(it->second.values.size()) || (std::string(name) == "weights" && got != want) ||
        (std::string(name) == "y" && got != want))
      bad(actual + ": " + name + ": shape " + shape_string(it->second.shape) + ", expected " + shape_string(want));
    const bool bits = it->second.dtype == "uint16" && m.attn.dtype == DType::bf16;
    if (!it->second.is_float() && !bits)
      bad(actual + ": " + name + ": dtype " + it->second.dtype + " is not a float type");
    if (std::string(name) == "weights")
      weights_delivered = bits                            ? DType::bf16
                          : it->second.dtype == "float16" ? DType::f16
                          : it->second.dtype == "float32" ? DType::f32
                                                          : DType::f64;
    Tensor wide(DType::f64, t.shape);  // judged in the dtype delivered: no rounding here
    for (size_t n = 0; n < it->second.values.size(); ++n)
      wide.set_offset(int64_t(n),
                      bits ? double(bf16_bits_to_float(uint16_t(it->second.values[n]))) : it->second.values[n]);
    t = wide;
  };
  fill("y", out.y);
  if (m.attn.want_weights) fill("weights", *out.weights);
  // Weights delivered coarser than the contract's fp32 (nn.MultiheadAttention in fp16/bf16 returns them in its
  // dtype): each weight rounded once more, an averaged one twice (the heads' weights, then their mean).
  ModuleTolerance tol = module_tolerance(m, f.inputs);
  if (weights_delivered == DType::f16 || weights_delivered == DType::bf16) {
    const double extra = (m.average_weights ? 2.0 : 1.0) * unit_roundoff(weights_delivered);
    for (size_t n = 0; n < tol.weights.size(); ++n) tol.weights[n] += extra * std::fabs(f.expected.weights[n]);
    note(std::string("weights delivered in ") + to_string(weights_delivered) + ": bound includes their rounding to it");
  }
  const Verdict v = module_check::judge(f, tol, out);
  CaseResult r = judged_result(f.name, expected, "candidate", v);
  describe_problem(r, m.attn);
  on_row(r, v.pass ? "" : diagnosis_line(module_check::diagnose(f, out), "(no module fault explains it)"));
  ModuleCompared c{{r}, v.pass};
  // Gradients given next to y (dx, dwq, ...): judged with the module gradient bound against the fixture's.
  ModuleGradOutputs g;
  for (const std::string& name : module_grad_names(m))
    if (const auto it = a.find(name); it != a.end()) {
      const Tensor& like = module_grad_input(f.inputs, name);
      if (it->second.shape != like.shape)
        bad(actual + ": " + name + ": shape " + shape_string(it->second.shape) + ", expected " +
            shape_string(like.shape));
      const bool bits = it->second.dtype == "uint16" && like.dtype == DType::bf16;
      if (!it->second.is_float() && !bits)
        bad(actual + ": " + name + ": dtype " + it->second.dtype + " is not a float type");
      Tensor t(DType::f64, like.shape);
      for (size_t n = 0; n < it->second.values.size(); ++n)
        t.set_offset(int64_t(n),
                     bits ? double(bf16_bits_to_float(uint16_t(it->second.values[n]))) : it->second.values[n]);
      g.emplace(name, std::move(t));
    }
  if (!g.empty()) {
    if (!f.grad)
      bad(actual + ": " + g.begin()->first + ": gradients given, but " + expected + " has no dy (import with dy)");
    const Verdict vb = module_check::judge_backward(f, module_grad_tolerance(m, f.inputs, f.dy->to_double()), g);
    CaseResult rb = judged_result(f.name, expected, "candidate/backward", vb);
    describe_problem(rb, m.attn);
    on_row(rb, vb.pass
                   ? ""
                   : diagnosis_line(module_check::diagnose_backward(f, g), "(no module backward fault explains it)"));
    c.rows.push_back(rb);
    c.pass = c.pass && vb.pass;
  }
  return c;
}

}  // namespace attncheck::verify
