// The work budget (budget.hpp): the process-wide limits, their machine-sized defaults and the estimates.
#include "attncheck/budget.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "attncheck/threads.hpp"

namespace attncheck {
namespace {

Budget& current() {
  static Budget b;
  return b;
}

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// A number with an optional one-letter suffix from `suffixes` (each 'unit' times the previous one).
double parse_scaled(const std::string& flag, const std::string& text, const std::string& suffixes, double unit,
                    const char* what) {
  const char* s = text.c_str();
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end != s && *end != '\0') {
    const auto at = suffixes.find(static_cast<char>(std::toupper(static_cast<unsigned char>(*end))));
    if (at != std::string::npos && end[1] == '\0') {
      v *= std::pow(unit, double(at + 1));
      ++end;
    }
  }
  if (end == s || *end != '\0' || !std::isfinite(v) || v < 1)
    throw std::invalid_argument(flag + ": expected " + what + ", got '" + text + "'");
  return v;
}

}  // namespace

const Budget& budget() { return current(); }
void set_budget(const Budget& b) { current() = b; }

Budget machine_budget() {
  Budget b;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) b.max_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 2;
  int threads = 1;
  try {
    threads = default_threads();
  } catch (const std::invalid_argument&) {  // a bad ATTNCHECK_THREADS is reported by the CLI, not here
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
  b.max_flops = double(threads) * 2.5e11;
  return b;
}

double reference_flops(const Problem& p, bool gradients) {
  const double fwd = 2.0 * double(p.B) * double(p.Hq) * double(p.Lq) * double(p.Lk) * double(p.Dqk + p.Dv);
  return gradients ? 3.5 * fwd : fwd;
}

std::string over_memory_budget(uint64_t cap) {
  return "more than the memory budget of " + std::to_string(cap) + " bytes (raise it with --max-memory)";
}

void check_work(const Problem& p, bool gradients, double max_flops) {
  const double need = reference_flops(p, gradients);
  if (max_flops > 0 && need > max_flops)
    throw std::invalid_argument("work: " + p.short_name() + (gradients ? " with gradients" : "") + " means " +
                                fmt(need) + " FLOPs of reference work, more than the work budget of " + fmt(max_flops) +
                                " FLOPs (raise it with --max-work)");
}

uint64_t parse_bytes(const std::string& flag, const std::string& text) {
  const double v = parse_scaled(flag, text, "KMGT", 1024.0, "bytes, optionally with K, M, G or T (e.g. 16G)");
  if (v >= 1.8e19) throw std::invalid_argument(flag + ": '" + text + "' is beyond 2^64 bytes");
  return static_cast<uint64_t>(v);
}

double parse_flops(const std::string& flag, const std::string& text) {
  return parse_scaled(flag, text, "KMGTP", 1000.0, "FLOPs, as a number (1e13) or with K, M, G, T or P (e.g. 50T)");
}

}  // namespace attncheck
