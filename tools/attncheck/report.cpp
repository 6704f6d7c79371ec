// The terminal table of result rows, the exit code and the progress bar (see report.hpp).
#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "attncheck/cancel.hpp"

namespace attncheck::cli {

namespace {
std::string fmt_err(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}
}  // namespace

void print_header() {
  std::printf("%-11s %-14s %-62s %-13s %-13s %s\n", "STATUS", "IMPL", "CASE", "MAX ABS ERR", "MAX REL ERR",
              "WORST ELEMENT / REASON");
}

void print_row(const CaseResult& r) {
  std::string status = to_string(r.status);
  for (char& c : status) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (r.judged) {
    const TensorVerdict& w = r.verdict.worst();
    std::printf("%-11s %-14s %-62s %-13s %-13s %s\n", status.c_str(), r.impl.c_str(), r.fixture.c_str(),
                fmt_err(w.max_abs_err).c_str(), fmt_err(w.max_rel_err).c_str(), r.message.c_str());
  } else {
    std::printf("%-11s %-14s %-62s %-13s %-13s %s\n", status.c_str(), r.impl.c_str(), r.fixture.c_str(), "-", "-",
                r.message.c_str());
  }
  std::fflush(stdout);
}

void print_unreadable(const std::vector<CaseResult>& rs) {
  std::vector<const CaseResult*> bad;
  for (const auto& r : rs)
    if (r.status == Status::input_error) bad.push_back(&r);
  if (bad.empty()) return;
  std::printf("unreadable input files (%zu), every other case judged:\n", bad.size());
  for (const auto* r : bad) std::printf("  %s\n", r->message.c_str());
}

void print_summary(const std::vector<CaseResult>& rs) {
  std::map<Status, int> n = status_counts(rs);
  // The first four always (scripts match them); the rarer outcomes only when they occurred.
  std::printf("\n%zu results: pass %d  fail %d  unsupported %d  error %d", rs.size(), n[Status::pass], n[Status::fail],
              n[Status::unsupported], n[Status::error]);
  int failures = 0;
  for (Status s : verify::all_statuses()) {
    if (is_failure(s) && s != Status::input_error) failures += n[s];  // unreadable files: print_unreadable lists them
    if (s != Status::pass && s != Status::fail && s != Status::unsupported && s != Status::error && n[s] > 0)
      std::printf("  %s %d", to_string(s).c_str(), n[s]);
  }
  std::printf("\n");
  if (n[Status::finite_required] > 0) {  // never a silent pass: each one listed, apart from the failures
    std::printf("outside the declared contract (masked_inputs: finite-required; not judged, not failures):\n");
    for (const auto& r : rs)
      if (r.status == Status::finite_required) std::printf("  %-14s %s\n", r.impl.c_str(), r.fixture.c_str());
  }
  if (failures > 0 && rs.size() > 20) {
    std::printf("failures and errors:\n");
    print_header();
    for (const auto& r : rs)
      if (is_failure(r.status) && r.status != Status::input_error) print_row(r);
  }
}

Progress::Progress(size_t total) : total_(total), enabled_(::isatty(2) == 1 && total > 1) {}
Progress::~Progress() { clear(); }

void Progress::step(const std::string& label) {
  throw_if_cancelled(label);  // every step of a long run is also where Ctrl-C takes effect (cancel.hpp)
  if (!enabled_) return;
  const int width = 30;
  const int filled = static_cast<int>(width * done_ / std::max<size_t>(total_, 1));
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r\033[K[%s] %zu/%zu %.60s", bar.c_str(), done_, total_, label.c_str());
  std::fflush(stderr);
  ++done_;
}

void Progress::clear() {
  if (!enabled_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

}  // namespace attncheck::cli
