// `attncheck verify`: replays golden fixtures against implementations and judges them with the tolerance model.
// Per (fixture, implementation): a status (report.hpp), errors and the worst element; a table, an optional JSON or
// JUnit report, GoogleTest-style sharding. Exit 0 all pass, 1 any failure, a named implementation unavailable or
// nothing compared (unless --allow-unavailable), 2 bad input: a fixture file that cannot be read gets its own row
// (input-error) while every other one is judged, and decides the exit code (2 before 1).
#include <fnmatch.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "attncheck/block_mask.hpp"
#include "attncheck/cancel.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/module_fixture.hpp"
#include "attncheck/declarations.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/durable_file.hpp"
#include "attncheck/suite.hpp"
#include "baseline_cli.hpp"
#include "command.hpp"
#include "diagnosis.hpp"
#include "gradients.hpp"
#include "invariance_rows.hpp"
#include "merge_rows.hpp"
#include "module_rows.hpp"
#include "plugins.hpp"
#include "repro.hpp"
#include "report.hpp"
#include "shard.hpp"

namespace attncheck::cli {
namespace {

namespace fs = std::filesystem;

struct Options {
  std::vector<std::string> impls, plugins;
  std::string fixtures = "golden", filter, report;
  std::optional<std::string> shard;
  bool allow_unavailable = false;
  bool diagnose = false;
  std::string repro;  // --repro DIR: with --diagnose, each failure's smallest repro written there as a fixture
  int diagnose_reruns = 12;
  double tol_scale = 1.0;  // --tol-scale: explicit multiplier of every tolerance, recorded in the report
  std::string pass = "forward";  // --pass forward|backward|both (gradients.hpp)
  std::string spec;        // --spec: cases generated on demand from a suite spec instead of fixture files
  int64_t rows = 0;        // --rows: with --spec, the reference computes about this many sampled query rows
  std::string invariance;  // --invariance rerun,batch|all: the invariance checks (invariance_rows.hpp), off by default
  int reruns = 3;          // --reruns K: runs of each case in the rerun check
  std::string invariance_level = "declared";  // --invariance-level: bitwise or within tolerance (invariance.hpp)
  std::string baseline;    // --baseline FILE.json: compare this run with a stored report (docs/regression.md)
  bool accept_baseline = false;  // --accept-baseline: write this run to --baseline instead of failing on drift
  BaselineOptions b;
  std::vector<int64_t> block_mask;  // --block-mask Q,K: the exact block mask handed to each run (docs/block-mask.md)
};
Options g;
std::set<std::string> g_merge_files;  // fixtures of kind "merge" (docs/states.md): judged by merge_row

// Filter: globs separated by ':', matched against the case name or the file name. A pattern starting with '-'
// and every pattern after it exclude (GoogleTest's "POS:POS:-NEG:NEG"). Unlike GoogleTest, a '-' inside a pattern
// is literal, because case names contain '-' ("fp16/B2-Hq4-...") and must paste back into --filter unchanged.
bool matches(const std::string& filter, const std::string& name, const std::string& file) {
  if (filter.empty()) return true;
  bool negative = false, any_positive = false, positive_hit = false;
  size_t start = 0;
  while (start <= filter.size()) {
    const size_t end = std::min(filter.find(':', start), filter.size());
    std::string pat = filter.substr(start, end - start);
    start = end + 1;
    if (!pat.empty() && pat[0] == '-') {
      negative = true;
      pat.erase(0, 1);
    }
    if (pat.empty()) continue;
    const bool hit = fnmatch(pat.c_str(), name.c_str(), 0) == 0 || fnmatch(pat.c_str(), file.c_str(), 0) == 0;
    if (negative && hit) return false;
    if (!negative) {
      any_positive = true;
      positive_hit = positive_hit || hit;
    }
  }
  return !any_positive || positive_hit;
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

// Why a file could not be read (std::invalid_argument and every other error but Ctrl-C), with the file named.
template <class F>
std::optional<std::string> read_error(const std::string& file, F read) {
  try {
    read();
    return std::nullopt;
  } catch (const Cancelled&) {
    throw;
  } catch (const std::exception& e) {
    const std::string m = e.what();
    return m.find(file) == std::string::npos ? file + ": " + m : m;
  }
}

// Every *.h5 under dir (recursively, sorted by path so shards are stable), with its case name; a file whose
// header cannot be read keeps its place with an empty name and the reason in `unreadable`.
std::vector<std::pair<std::string, std::string>> list_fixtures(const std::string& dir,
                                                               std::map<std::string, std::string>& unreadable) {
  if (!fs::is_directory(dir))
    throw std::invalid_argument("--fixtures: '" + dir + "' is not a directory (run from the repository root, or "
                                "pass --fixtures DIR)");
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".h5" && e.path().filename().string()[0] != '.')
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  const std::vector<std::string> merges = take_merge_fixtures(files);  // states and merges: docs/states.md
  prepare_fixture_reads(files);  // every file read once in one separate process, not one process per read
  prepare_module_reads(files);   // likewise for the module-fixture check and the module fixtures
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : files) {
    std::string name;
    if (is_module_fixture(f)) {  // judged through module entries (module_rows.hpp); unreadable: its own row there
      out.emplace_back(f, module_case_name(f));
      continue;
    }
    if (auto why = read_error(f, [&] { name = read_fixture_header(f).name; })) unreadable[f] = *why;
    out.emplace_back(f, name);
  }
  for (const auto& f : merges) {
    std::string name;
    if (auto why = read_error(f, [&] { name = read_merge_fixture(f).problem.name; })) unreadable[f] = *why;
    g_merge_files.insert(f);
    out.emplace_back(f, name);
  }
  return out;
}

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
  return fixture;  // still unsupported without the optional outputs: report the fixture's own reason
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

bool is_json_path(const std::string& p) { return p.size() >= 5 && p.compare(p.size() - 5, 5, ".json") == 0; }

// A shard's JSON report: the run's report with each row's unit (its fixture's place in the whole run's sorted list),
// and in the shard mark what `merge` needs to finish the whole run's report: the fixtures read without checksums
// and the exit rules of the command line.
std::string shard_report_json(const std::vector<CaseResult>& results, const std::vector<std::string>& notes,
                              const Shard& shard,
                              const std::map<std::string, std::vector<std::pair<std::string, size_t>>>& unit_of,
                              int64_t unchecksummed, const ExitRules& rules) {
  nlohmann::json j = nlohmann::json::parse(report_json(results, g.tol_scale, false, notes));
  for (auto& row : j["cases"]) {
    const auto& units = unit_of.at(row["file"].get<std::string>());
    size_t unit = units.front().second;  // one fixture per file; a --spec run names its cases in one file
    for (const auto& [name, k] : units)
      if (name == row["fixture"]) unit = k;
    row["unit"] = unit;
  }
  stamp_shard(j, shard, "verify", 2);
  j["shard"]["unchecksummed"] = unchecksummed;
  j["shard"]["must_be_available"] = rules.must_be_available;
  j["shard"]["require_compared"] = rules.require_compared;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// merge: the summary, the notes and the exit code of the whole run, from every shard's rows (exit_code's rules).
int verify_merged(nlohmann::json& j, const std::vector<nlohmann::json>& shards) {
  std::vector<CaseResult> rs;
  for (const auto& row : j["cases"]) {
    CaseResult r;
    r.fixture = row["fixture"], r.file = row["file"], r.impl = row["impl"];
    const std::string status = row["status"];
    const std::optional<Status> s = verify::status_from_string(status);
    if (!s) throw std::invalid_argument("merge: unknown status '" + status + "' in a verify shard's row");
    r.status = *s;
    r.message = row["message"], r.judged = row.contains("tensors");
    rs.push_back(std::move(r));
  }
  std::map<std::string, int> n;
  for (Status s : verify::all_statuses()) n[to_string(s)] = 0;
  for (const auto& r : rs) ++n[to_string(r.status)];
  j["summary"] = n;
  int64_t unchecksummed = 0;
  for (const auto& s : shards) unchecksummed += s["shard"].value("unchecksummed", int64_t{0});
  j.erase("notes");
  if (unchecksummed) j["notes"] = {unchecksummed_note(unchecksummed)};
  ExitRules rules;
  rules.must_be_available = shards.front()["shard"].value("must_be_available", std::vector<std::string>{});
  rules.require_compared = shards.front()["shard"].value("require_compared", false);
  return exit_code(rs, rules);
}
const RegisterMerge merge{{"verify", {"tol_scale", "schema_version"}, {"cases"}, verify_merged}};

int run_verify() {
  const Pass pass = pass_from_string(g.pass);
  load_plugins(g.plugins);
  if (!g.report.empty()) check_report_path(g.report);
  if (!g.repro.empty()) {
    if (!g.diagnose)
      throw std::invalid_argument("--repro: needs --diagnose (the repro is reduced while it keeps the diagnosis of the "
                                  "failure; add --diagnose or drop --repro " + g.repro + ")");
    std::error_code ec;
    fs::create_directories(g.repro, ec);
    if (ec || !fs::is_directory(g.repro))
      throw std::invalid_argument("--repro: cannot create the directory '" + g.repro + "'" + (ec ? ": " + ec.message() : ""));
  }
  std::optional<baseline::Report> before;  // read first: a bad baseline is exit 2 before any work
  if (!g.baseline.empty()) {
    (void)thresholds(g.b);
    check_baseline_outputs(g.b);
    if (!g.accept_baseline || fs::exists(g.baseline)) before = baseline::load_report(g.baseline);
  } else if (g.accept_baseline || !g.b.summary.empty() || !g.b.junit.empty()) {
    throw std::invalid_argument("--accept-baseline, --summary and --junit need --baseline FILE.json");
  }
  const std::vector<ImplPtr> impls = maybe_isolate(select_impls(g.impls));
  const invariance::Options inv = invariance_options(g.invariance, g.reruns, g.invariance_level);
  const bool inv_on = inv.rerun || inv.batch || inv.schedule || inv.layout;
  if (g.rows > 0 && g.spec.empty()) throw std::invalid_argument("--rows: needs --spec (fixture files hold every row)");
  if (has_backward(pass) && !g.spec.empty())
    throw std::invalid_argument("--pass " + g.pass + ": not with --spec (gradients are judged from fixture files, "
                                "e.g. --fixtures golden/backward)");
  SuiteSpec suite;  // --spec: (spec file, case name) pairs, each case generated when its turn comes
  std::vector<std::pair<std::string, std::string>> fixtures;
  std::map<std::string, std::string> unreadable;  // file -> why: one input-error row each, every other file judged
  if (!g.spec.empty()) {
    suite = read_suite(g.spec);
    for (const auto& c : suite.cases) fixtures.emplace_back(g.spec, c.name);
  } else {
    fixtures = list_fixtures(g.fixtures, unreadable);
    if (fixtures.empty()) throw std::invalid_argument("--fixtures: no *.h5 fixtures under '" + g.fixtures + "'");
  }
  auto load = [&](const std::string& file, const std::string& name) {
    if (g.spec.empty()) return read_fixture(file);
    for (const auto& c : suite.cases)
      if (c.name == name) return build_case_rows(c, suite.file_name, g.rows);
    throw std::logic_error("no case " + name);
  };
  std::erase_if(fixtures, [](const auto& f) {
    const std::string file = fs::path(f.first).filename().string();
    return !matches(g.filter, f.second.empty() ? file : f.second, file);
  });
  if (fixtures.empty()) throw std::invalid_argument("--filter: '" + g.filter + "' matches no fixture");
  if (!has_forward(pass)) {  // the backward pass alone: only fixtures that carry gradients
    std::erase_if(fixtures, [&](const auto& f) {
      if (is_module_fixture(f.first)) return !module_fixture_has_gradients(f.first);
      return g_merge_files.count(f.first) || (!unreadable.count(f.first) && !read_fixture_header(f.first).has_gradients);
    });
    if (fixtures.empty())
      throw std::invalid_argument("--pass backward: no fixture with gradients under '" + g.fixtures +
                                  "' (matching the filter); golden/backward has them");
  }
  const std::optional<Shard> shard = resolve_shard(g.shard);
  std::map<std::string, std::vector<std::pair<std::string, size_t>>> unit_of;  // file -> (case name, unit)
  if (const std::optional<Shard>& sh = shard) {
    std::vector<std::pair<std::string, std::string>> mine;
    for (size_t k = 0; k < fixtures.size(); ++k)
      if (sh->owns(k)) mine.push_back(fixtures[k]), unit_of[fixtures[k].first].emplace_back(fixtures[k].second, k);
    fixtures = std::move(mine);
    announce_shard(*sh, fixtures.size(), "fixtures");
  }

  // Availability is a property of the machine, asked once per implementation; every case of an unavailable one is
  // reported as such (with the reason), never as unsupported or passed.
  std::vector<Support> avail;
  for (const auto& impl : impls) avail.push_back(impl->available());

  std::vector<CaseResult> results;
  int64_t unchecksummed = 0;  // fixtures read without checksums
  print_header();
  Progress progress(fixtures.size() * impls.size());
  for (const auto& [file, name] : fixtures) {
    if (g_merge_files.count(file) && !unreadable.count(file)) {  // a merge fixture: one merge row per implementation
      const MergeFixture mf = read_merge_fixture(file);
      for (size_t ii = 0; ii < impls.size(); ++ii) {
        progress.step(impls[ii]->name() + " " + name);
        std::vector<std::string> lines;
        CaseResult r = merge_row(*impls[ii], avail[ii], mf, file, g.diagnose ? &lines : nullptr);
        progress.clear();
        print_row(r);
        for (const std::string& l : lines) std::printf("    %s\n", l.c_str());
        results.push_back(std::move(r));
      }
      continue;
    }
    if (g.spec.empty() && is_module_fixture(file)) {  // a module fixture: its module entries, no invariance checks
      for (ModuleRow& m : module_rows(file, impls, avail, g.diagnose, g.tol_scale, has_forward(pass), has_backward(pass))) {
        progress.clear();
        print_row(m.row);
        for (const std::string& l : m.lines) std::printf("    %s\n", l.c_str());
        results.push_back(std::move(m.row));
      }
      continue;
    }
    Fixture f;
    if (!g.spec.empty())
      f = load(file, name);  // a spec that cannot build its case is a usage error: exit 2 via main
    else if (!unreadable.count(file))
      if (auto why = read_error(file, [&] { f = load(file, name); })) unreadable[file] = *why;
    if (unreadable.count(file)) {  // its own row; the run goes on, and exits 2 at the end
      progress.clear();
      results.push_back(input_error(file, unreadable[file]));
      print_row(results.back());
      continue;
    }
    unchecksummed += !f.checksummed;
    const uint64_t pristine = inputs_hash(f.inputs);
    for (size_t ii = 0; has_forward(pass) && ii < impls.size(); ++ii) {
      const ImplPtr& impl = impls[ii];
      progress.step(impl->name() + " " + name);
      CaseResult r = unjudged(name, file, impl->name());
      std::vector<std::string> diagnosis;
      std::vector<InvarianceRow> checks;  // --invariance: rows after the judged one
      if (!avail[ii].ok) {
        r.status = Status::unavailable;
        r.message = "unavailable: " + avail[ii].reason;
      } else try {
        Outputs out;
        std::string unchecked;
        ReferenceResult recomputed;
        Problem p = f.problem;
        const std::string note = under_declared_policy(*impl, f, p, recomputed);
        p = judged_problem(*impl, p, unchecked);
        std::optional<BlockMask> bm;  // read by a built-in run on this thread (BlockMaskScope)
        if (!g.block_mask.empty()) bm = derive_block_mask(p, f.inputs, g.block_mask[0], g.block_mask[1]);
        const BlockMaskScope handed(bm ? &*bm : nullptr);
        const Support s = run_impl(*impl, p, f.inputs, out);
        if (!s.ok) {
          r.status = Status::unsupported;
          r.message = s.reason;
        } else {
          ToleranceModel m = f.tolerance;  // the bound follows the implementation's declared contract, scaled openly
          m.contract = impl->declarations().contract_for(p.dtype);
          m.scale = g.tol_scale;
          r = judged_result(name, file, impl->name(), judge(p, note.empty() ? f.expected : recomputed, out, m));
          if (!unchecked.empty()) r.message = unchecked + " not checked (not supported); " + r.message;
          if (!note.empty()) r.message = note + "; " + r.message;
          if (impl->declarations().masked_inputs == MaskedInputs::finite_required)
            apply_masked_inputs_contract(nonfinite_inputs(f.inputs), r);
          if (inv_on) {
            invariance::Options o = inv;  // variants judged within tolerance as this row was
            o.within_tolerance = [&](const Outputs& x) {
              const Verdict v = judge(p, note.empty() ? f.expected : recomputed, x, m);
              return v.pass ? std::string() : v.worst().describe();
            };
            std::function<diagnose::Repro(const invariance::Check&)> repro;
            if (g.diagnose && !g.repro.empty())
              repro = [&](const invariance::Check& c) {
                return diagnose::write_invariance_repro(f, p, *impl, c, o, m, g.repro);
              };
            checks = invariance_rows(*impl, name, file, p, f.inputs, out, o, repro);
            // A case outside a finite-required contract promises nothing, its invariance included: reported apart.
            if (impl->declarations().masked_inputs == MaskedInputs::finite_required)
              for (InvarianceRow& c : checks) outside_contract(nonfinite_inputs(f.inputs), c);
          }
          if (g.diagnose && r.status == Status::fail) {
            diagnose::Options o;
            o.rerun = impl.get(), o.max_reruns = g.diagnose_reruns, o.tolerance = m;
            diagnose::Diagnosis d = diagnose::diagnose({{}, p, f.inputs}, note.empty() ? f.expected : recomputed, out, o);
            if (!g.repro.empty()) d.repro = diagnose::write_repro(f, p, *impl, d, o, g.repro);
            diagnosis = d.text();
            r.diagnosis_json = diagnose::to_json(d);
          }
        }
        if (inputs_hash(f.inputs) != pristine) {
          r = unjudged(name, file, impl->name());
          r.status = Status::modified_input;
          r.message = impl->name() + " wrote into its inputs on " + name + " (input checksum changed); the fixture "
                      "is read again for the next implementation";
          f = load(file, name);
        }
      } catch (const std::exception&) {
        record_exception(r);
      }
      describe_problem(r, f.problem);
      progress.clear();
      print_row(r);
      for (const std::string& l : diagnosis) std::printf("    %s\n", l.c_str());
      results.push_back(std::move(r));
      for (InvarianceRow& c : checks) {
        describe_problem(c.row, f.problem);
        print_row(c.row);
        for (const std::string& l : c.lines) std::printf("    %s\n", l.c_str());
        results.push_back(std::move(c.row));
      }
    }
    for (size_t ii = 0; has_backward(pass) && f.has_gradients && ii < impls.size(); ++ii) {
      progress.step(backward_label(impls[ii]->name()) + " " + name);
      std::vector<InvarianceRow> checks;
      CaseResult r = backward_row(*impls[ii], avail[ii], f, file, g.tol_scale, inv.rerun ? inv.runs : 0, &checks, &inv);
      describe_problem(r, f.problem);
      progress.clear();
      print_row(r);
      results.push_back(std::move(r));
      for (InvarianceRow& c : checks) {
        describe_problem(c.row, f.problem);
        print_row(c.row);
        for (const std::string& l : c.lines) std::printf("    %s\n", l.c_str());
        results.push_back(std::move(c.row));
      }
    }
  }
  progress.clear();
  print_summary(results);
  print_unreadable(results);
  std::vector<std::string> notes;
  if (unchecksummed) notes.push_back(unchecksummed_note(unchecksummed));
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  ExitRules rules;
  if (!g.allow_unavailable) {
    rules.require_compared = true;
    const bool all = g.impls.empty() || std::find(g.impls.begin(), g.impls.end(), "all") != g.impls.end();
    if (!all)
      for (const auto& impl : impls) rules.must_be_available.push_back(impl->name());
  }
  if (!g.report.empty() && shard && is_json_path(g.report))
    write_report_file(g.report, shard_report_json(results, notes, *shard, unit_of, unchecksummed, rules));
  else if (!g.report.empty())
    write_report(g.report, results, g.tol_scale, notes);
  if (g.tol_scale != 1.0) std::printf("every tolerance scaled by --tol-scale %g\n", g.tol_scale);
  int rc = exit_code(results, rules);
  if (!g.baseline.empty()) {
    const std::string now = report_json(results, g.tol_scale);
    int n = 0;
    if (before) {
      const baseline::Comparison c =
          baseline::compare_reports(*before, baseline::parse_report(now, "this run"), thresholds(g.b), true);
      n = report_comparison(c, g.b, "attncheck verify against " + g.baseline);
    }
    if (g.accept_baseline) {
      write_file_durably(g.baseline, report_json(results, g.tol_scale, true));
      std::printf("baseline %s %s by this run (--accept-baseline)\n", g.baseline.c_str(), before ? "replaced" : "written");
    } else if (n > 0) {
      std::printf("exit 1: %d regression%s against the baseline %s (--accept-baseline makes this run the baseline)\n",
                  n, n > 1 ? "s" : "", g.baseline.c_str());
      rc = 1;
    }
  }
  return rc;
}

const Register reg{{"verify", "Replay golden fixtures against implementations", [](CLI::App& sub) {
                      sub.add_option("--impl", g.impls, "Implementation names, or all (default: all)");
                      sub.add_option("--fixtures", g.fixtures, "Directory searched for *.h5 fixtures")
                          ->capture_default_str();
                      sub.add_option("--spec", g.spec, "Generate the cases of a suite spec on demand instead "
                                                       "(e.g. golden/suite-long.json)");
                      sub.add_option("--rows", g.rows, "With --spec: reference on about N sampled query rows, "
                                                       "reference-free checks on every row (docs/tolerance.md)")
                          ->check(CLI::PositiveNumber);
                      sub.add_option("--filter", g.filter,
                                     "Globs on case or file names, ':'-separated; '-' before a glob excludes: 'fp16/*:-*drop*'");
                      sub.add_option("--report", g.report, "Write a report: FILE.json or FILE.xml (JUnit)");
                      add_shard_option(sub, g.shard);
                      sub.add_option("--pass", g.pass,
                                     "forward, backward (gradients of the fixtures that have them) or both")
                          ->capture_default_str();
                      sub.add_flag("--diagnose", g.diagnose,
                                   "For each failure: error anatomy, likely causes (tags) and probes that re-run the "
                                   "implementation on derived problems (docs/diagnosis.md)");
                      sub.add_option("--diagnose-reruns", g.diagnose_reruns, "Re-run budget per diagnosed failure")
                          ->capture_default_str()->check(CLI::Range(0, 1000));
                      sub.add_option("--repro", g.repro,
                                     "With --diagnose: reduce each failure to a small case with the same diagnosis and "
                                     "write it into DIR as a fixture that verify replays");
                      sub.add_option("--block-mask", g.block_mask,
                                     "Q_BLOCK,KV_BLOCK: hand each forward run the exact block mask at these sizes (built-ins "
                                     "in this process; cpu-flash consumes it at its tiles, 48,256 for D <= 64; docs/block-mask.md)")
                          ->delimiter(',')
                          ->expected(2)
                          ->check(CLI::PositiveNumber);
                      sub.add_option("--tol-scale", g.tol_scale, "Multiply every derived tolerance by X (recorded in the report)")
                          ->check(CLI::PositiveNumber);
                      sub.add_option("--invariance", g.invariance,
                                     "Also check invariance of every judged case: rerun (same bits run after run), "
                                     "batch (alone and in other batches), schedule (other threads, splits, block "
                                     "orders), layout (BHSD, BSHD, other strides), or all (docs/invariance.md)");
                      sub.add_option("--invariance-level", g.invariance_level,
                                     "How batch, schedule and layout variants must agree: declared (bitwise where the "
                                     "implementation promises it, else within tolerance), bitwise or tolerance")
                          ->capture_default_str();
                      sub.add_option("--reruns", g.reruns, "With --invariance rerun: runs of each case in all (K)")
                          ->capture_default_str()->check(CLI::Range(2, 100));
                      sub.add_flag("--allow-unavailable", g.allow_unavailable,
                                   "Exit 0 even when a named implementation is unavailable or no case was compared");
                      sub.add_option("--baseline", g.baseline,
                                     "Compare with a stored report (FILE.json): new failures, lost features, accuracy "
                                     "drift inside the tolerance; exit 1 on a regression (docs/regression.md)");
                      sub.add_flag("--accept-baseline", g.accept_baseline,
                                   "Write this run's report to --baseline (creating or replacing it) instead of failing on its regressions");
                      add_baseline_options(sub, g.b);
                      add_plugin_option(sub, g.plugins);
                      return std::function<int()>(run_verify);
                    }}};

}  // namespace
}  // namespace attncheck::cli
