#include "judge.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "attncheck/block_mask.hpp"
#include "attncheck/cancel.hpp"
#include "attncheck/declarations.hpp"
#include "attncheck/module_fixture.hpp"
#include "attncheck/reference.hpp"
#include "diagnosis.hpp"
#include "invariance_rows.hpp"
#include "merge_row.hpp"
#include "module_rows.hpp"
#include "repro.hpp"

namespace attncheck::verify {

std::vector<std::string> Judged::notes() const {
  if (!unchecksummed) return {};
  return {unchecksummed_note(unchecksummed)};
}

std::vector<ImplPtr> select_impls(const std::vector<std::string>& names) {
  if (names.empty() || std::find(names.begin(), names.end(), "all") != names.end()) return registry();
  std::vector<ImplPtr> out;
  for (const auto& n : names) {
    ImplPtr i = find_impl(n);
    if (!i) {
      std::string known;
      for (const auto& r : registry()) known += (known.empty() ? "" : ", ") + r->name();
      throw std::invalid_argument("--impl: unknown implementation '" + n + "' (known: " + known + ")");
    }
    out.push_back(i);
  }
  return out;
}

namespace {

// A fixture stores every output the reference has. Weights and lse are optional outputs: an implementation that
// cannot produce them (fused kernels rarely return weights) is judged on the outputs it can produce, and the row
// says which went unchecked. `out` is never optional, and no other feature is ever dropped.
Problem judged_problem(const Impl& impl, const Problem& fixture, std::string& unchecked) {
  if (!impl.available().ok || impl.supports(fixture).ok) return fixture;
  Problem p = fixture;
  for (auto [flag, name] : {std::pair{&Problem::want_weights, "weights"}, std::pair{&Problem::want_lse, "lse"}}) {
    if (!(p.*flag)) continue;
    p.*flag = false;
    unchecked += (unchecked.empty() ? "" : ", ") + std::string(name);
    if (impl.supports(p).ok) return p;
  }
  unchecked.clear();
  return p;  // unsupported even without the optional outputs: the run reports what else stops it
}

// A fixture written with a fully-masked policy the implementation does not support, while it declares another one:
// judge it under its declared policy, with the expectation recomputed by the reference from the fixture's inputs.
// Returns the note for the row, "" when the fixture is judged as written.
std::string under_declared_policy(const Impl& impl, const Fixture& f, Problem& p, ReferenceResult& expected) {
  const Declarations d = impl.declarations();
  if (!d.fully_masked_policy || *d.fully_masked_policy == p.fully_masked ||
      impl.capabilities().fully_masked.count(p.fully_masked))
    return "";
  Problem q = p;
  q.fully_masked = *d.fully_masked_policy;
  try {
    validate(q, f.inputs);
  } catch (const std::exception&) {
    return "";  // the declared policy cannot describe this problem: judged (unsupported) as written
  }
  expected = reference_attention_rows(q, f.inputs, f.expected.sampled_rows);
  const std::string note = std::string("judged under the declared fully-masked policy ") + to_string(q.fully_masked) +
                           " (fixture: " + to_string(p.fully_masked) + ", expectation recomputed by the reference)";
  p = q;
  return note;
}

// FNV-1a over every input byte: an implementation running in this process that writes into its inputs is caught
// (isolated ones work on a copy in shared memory and are checked there, element by element).
uint64_t inputs_hash(const Inputs& in) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor* t : {&in.q, &in.k, &in.v, in.mask ? &*in.mask : nullptr, in.bias ? &*in.bias : nullptr,
                          in.keep ? &*in.keep : nullptr})
    if (t)
      for (uint8_t b : t->bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

bool finite_required(const Impl& impl) { return impl.declarations().masked_inputs == MaskedInputs::finite_required; }

// One judged forward row and what follows it: the diagnosis lines and the invariance rows.
struct ForwardRows {
  CaseResult row;
  std::vector<std::string> diagnosis;
  std::vector<InvarianceRow> checks;
};

// The invariance checks of a judged forward case; variants are judged within tolerance as the row was.
std::vector<InvarianceRow> forward_checks(const Impl& impl, const Fixture& f, const Problem& p,
                                          const ReferenceResult& expected, const Outputs& out, const ToleranceModel& m,
                                          const Judging& j, const CaseResult& row) {
  invariance::Options o = j.invariance;
  o.within_tolerance = [&](const Outputs& x) {
    const Verdict v = judge(p, expected, x, m);
    return v.pass ? std::string() : v.worst().describe();
  };
  std::function<diagnose::Repro(const invariance::Check&)> repro;
  if (j.diagnose && !j.repro.empty())
    repro = [&](const invariance::Check& c) { return diagnose::write_invariance_repro(f, p, impl, c, o, m, j.repro); };
  std::vector<InvarianceRow> checks = invariance_rows(impl, row.fixture, row.file, p, f.inputs, out, o, repro);
  // A case outside a finite-required contract promises nothing, its invariance included: reported apart.
  if (finite_required(impl))
    for (InvarianceRow& c : checks) outside_contract(nonfinite_inputs(f.inputs), c);
  return checks;
}

// Runs impl once on the case (under its declared policy, without the optional outputs it cannot produce) and
// judges the outputs under its declared contract; a failure is diagnosed when asked.
void judge_forward(const Impl& impl, const Fixture& f, const Judging& j, ForwardRows& fw) {
  CaseResult& r = fw.row;
  std::string unchecked;
  ReferenceResult recomputed;
  Problem p = f.problem;
  const std::string note = under_declared_policy(impl, f, p, recomputed);
  const ReferenceResult& expected = note.empty() ? f.expected : recomputed;
  p = judged_problem(impl, p, unchecked);
  // Read by a run on this thread (BlockMaskScope), reruns included: the sizes asked for, else the fixture's own.
  std::optional<BlockMask> bm = f.block_mask;
  if (!j.block_mask.empty()) bm = derive_block_mask(p, f.inputs, j.block_mask[0], j.block_mask[1]);
  const BlockMaskScope handed(bm ? &*bm : nullptr);
  Outputs out;
  const Support s = run_impl(impl, p, f.inputs, out);
  if (!s.ok) {
    r.status = Status::unsupported, r.message = s.reason;
    return;
  }
  ToleranceModel m = f.tolerance;  // the bound follows the implementation's declared contract, scaled openly
  m.contract = impl.declarations().contract_for(p.dtype);
  m.scale = j.tol_scale;
  r = judged_result(r.fixture, r.file, impl.name(), judge(p, expected, out, m));
  if (!unchecked.empty()) r.message = unchecked + " not checked (not supported); " + r.message;
  if (!note.empty()) r.message = note + "; " + r.message;
  if (finite_required(impl)) apply_masked_inputs_contract(nonfinite_inputs(f.inputs), r);
  const invariance::Options& inv = j.invariance;
  if (inv.rerun || inv.batch || inv.schedule || inv.layout)
    fw.checks = forward_checks(impl, f, p, expected, out, m, j, r);
  if (j.diagnose && r.status == Status::fail) {
    diagnose::Options o;
    o.rerun = &impl, o.max_reruns = j.diagnose_reruns, o.tolerance = m;
    diagnose::Diagnosis d = diagnose::diagnose({{}, p, f.inputs}, expected, out, o);
    if (!j.repro.empty()) d.repro = diagnose::write_repro(f, p, impl, d, o, j.repro);
    fw.diagnosis = d.text();
    r.diagnosis_json = diagnose::to_json(d);
  }
}

// The rows of one case and what the caller is shown of them.
class Rows {
 public:
  Rows(Judged& out, const Observer& seen) : out_(out), seen_(seen) {}
  void step(const std::string& label) const {
    throw_if_cancelled(label);  // every run of a long judging is also where Ctrl-C takes effect (cancel.hpp)
    if (seen_.step) seen_.step(label);
  }
  void add(CaseResult r, const std::vector<std::string>& lines = {}) {
    if (seen_.row) seen_.row(r, lines);
    out_.rows.push_back(std::move(r));
  }
  void add_checks(std::vector<InvarianceRow>& checks, const Problem& p) {
    for (InvarianceRow& c : checks) {
      describe_problem(c.row, p);
      add(std::move(c.row), c.lines);
    }
  }

 private:
  Judged& out_;
  const Observer& seen_;
};

// An attention fixture: each implementation's forward row (the pass asking), then its backward row (for a fixture
// with gradients). An implementation that writes into its inputs is reported, and the fixture read again.
void judge_attention(Fixture& f, const Case& c, const Cases& cases, const std::vector<ImplPtr>& impls,
                     const std::vector<Support>& avail, const Judging& j, Rows& rows) {
  const uint64_t pristine = inputs_hash(f.inputs);
  for (size_t ii = 0; has_forward(j.pass) && ii < impls.size(); ++ii) {
    const Impl& impl = *impls[ii];
    rows.step(impl.name() + " " + c.name);
    ForwardRows fw{unjudged(c.name, c.file, impl.name()), {}, {}};
    if (!avail[ii].ok) {
      fw.row.status = Status::unavailable, fw.row.message = "unavailable: " + avail[ii].reason;
    } else
      try {
        judge_forward(impl, f, j, fw);
        if (inputs_hash(f.inputs) != pristine) {
          fw.row = unjudged(c.name, c.file, impl.name());
          fw.row.status = Status::modified_input;
          fw.row.message = impl.name() + " wrote into its inputs on " + c.name +
                           " (input checksum changed); the "
                           "fixture is read again for the next implementation";
          f = load_case(cases, c);
        }
      } catch (const std::exception&) {
        record_exception(fw.row);
      }
    describe_problem(fw.row, f.problem);
    rows.add(std::move(fw.row), fw.diagnosis);
    rows.add_checks(fw.checks, f.problem);
  }
  const invariance::Options& inv = j.invariance;
  for (size_t ii = 0; has_backward(j.pass) && f.has_gradients && ii < impls.size(); ++ii) {
    rows.step(backward_label(impls[ii]->name()) + " " + c.name);
    std::vector<InvarianceRow> checks;
    CaseResult r = backward_row(*impls[ii], avail[ii], f, c.file, j.tol_scale, inv.rerun ? inv.runs : 0, &checks, &inv);
    describe_problem(r, f.problem);
    rows.add(std::move(r));
    rows.add_checks(checks, f.problem);
  }
}

}  // namespace

Judged judge_cases(Cases& cases, const std::vector<ImplPtr>& impls, const Judging& j, const Observer& seen) {
  std::vector<Support> avail;
  for (const auto& impl : impls) avail.push_back(impl->available());
  Judged out;
  Rows rows(out, seen);
  for (const Case& c : cases.list) {
    const std::string& file = c.file;
    if (cases.merges.count(file) && !cases.unreadable.count(file)) {  // one merge row per implementation
      const MergeFixture mf = read_merge_fixture(file);
      for (size_t ii = 0; ii < impls.size(); ++ii) {
        rows.step(impls[ii]->name() + " " + c.name);
        std::vector<std::string> lines;
        CaseResult r = merge_row(*impls[ii], avail[ii], mf, file, j.diagnose ? &lines : nullptr);
        rows.add(std::move(r), lines);
      }
      continue;
    }
    if (cases.spec.empty() && is_module_fixture(file)) {  // its module entries, no invariance checks
      for (ModuleRow& m :
           module_rows(file, impls, avail, j.diagnose, j.tol_scale, has_forward(j.pass), has_backward(j.pass)))
        rows.add(std::move(m.row), m.lines);
      continue;
    }
    Fixture f;
    if (!cases.spec.empty())
      f = load_case(cases, c);  // a spec that cannot build its case is a usage error
    else if (!cases.unreadable.count(file))
      if (auto why = read_error(file, [&] { f = load_case(cases, c); })) cases.unreadable[file] = *why;
    if (cases.unreadable.count(file)) {  // its own row; the run goes on
      rows.add(input_error(file, cases.unreadable[file]));
      continue;
    }
    out.unchecksummed += !f.checksummed;
    judge_attention(f, c, cases, impls, avail, j, rows);
  }
  return out;
}

void prepare_repro_dir(const std::string& repro, bool diagnose) {
  if (repro.empty()) return;
  if (!diagnose)
    throw std::invalid_argument(
        "--repro: needs --diagnose (the repro is reduced while it keeps the diagnosis of the "
        "failure; add --diagnose or drop --repro " +
        repro + ")");
  std::error_code ec;
  std::filesystem::create_directories(repro, ec);
  if (ec || !std::filesystem::is_directory(repro))
    throw std::invalid_argument("--repro: cannot create the directory '" + repro + "'" +
                                (ec ? ": " + ec.message() : ""));
}

}  // namespace attncheck::verify
