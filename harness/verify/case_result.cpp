#include "case_result.hpp"

#include <cstring>
#include <filesystem>

#include "attncheck/features.hpp"
#include "attncheck/run_failure.hpp"

namespace attncheck::verify {

CaseResult unjudged(std::string fixture, std::string file, std::string impl) {
  CaseResult r;
  r.fixture = std::move(fixture), r.file = std::move(file), r.impl = std::move(impl);
  return r;
}

void describe_problem(CaseResult& r, const Problem& p) {
  r.dtype = to_string(p.dtype);
  r.features.clear();
  // Features every problem "uses" (dtype, layout, ...) and the optional outputs (weights, lse) are no grouping key.
  static const Problem plain{};
  for (const Feature& f : problem_features())
    if (f.uses(p) && !f.uses(plain) && std::strcmp(f.name, "weights") != 0 && std::strcmp(f.name, "lse") != 0)
      r.features.emplace_back(f.name);
}

CaseResult judged_result(std::string fixture, std::string file, std::string impl, Verdict v) {
  CaseResult r = unjudged(std::move(fixture), std::move(file), std::move(impl));
  r.status = v.pass ? Status::pass : Status::fail;
  r.judged = true;
  std::string msg;
  for (const auto& t : v.tensors)
    if (!t.pass) msg += (msg.empty() ? "" : "; ") + t.describe();
  if (msg.empty() && !v.tensors.empty()) msg = v.worst().describe();
  r.message = msg;
  r.verdict = std::move(v);
  return r;
}

void apply_masked_inputs_contract(const std::string& nonfinite_inputs, CaseResult& r) {
  if (nonfinite_inputs.empty()) return;
  r.message = "outside the declared contract (masked_inputs: finite-required): non-finite values in " +
              nonfinite_inputs + "; its run: " + to_string(r.status) + (r.message.empty() ? "" : ": " + r.message);
  r.status = Status::finite_required, r.judged = false;
}

void record_exception(CaseResult& r) {
  try {
    throw;
  } catch (const RunFailure& e) {
    // The isolation layer names its outcomes with the report's spelling; one it does not know is still an error.
    const std::optional<Status> s = status_from_string(e.outcome());
    r.status = s ? *s : Status::error;
    r.message = s ? e.what() : e.outcome() + ": " + e.what();
  } catch (const std::exception& e) {
    r.status = Status::error;
    r.message = e.what();
  }
}

CaseResult input_error(const std::string& file, const std::string& reason) {
  CaseResult r = unjudged(std::filesystem::path(file).filename().string(), file, "-");
  r.status = Status::input_error, r.message = reason;
  return r;
}

std::string unchecksummed_note(int64_t n) {
  return (n == 1 ? std::string("1 fixture carries") : std::to_string(n) + " fixtures carry") +
         " no Fletcher32 checksums (written before attncheck checksummed its fixtures, or by another tool): a changed "
         "bit in their stored values cannot be detected";
}

}  // namespace attncheck::verify
