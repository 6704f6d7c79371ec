#include "shard.hpp"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace attncheck::cli {
namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("--shard: " + what); }

// A whole non-negative decimal integer, or -1.
int64_t whole(const char* s) {
  if (s == nullptr || *s == '\0') return -1;
  try {
    size_t used = 0;
    const long long v = std::stoll(s, &used);
    return used == std::char_traits<char>::length(s) && v >= 0 ? v : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

Shard checked(int64_t i, int64_t n, const std::string& source, const std::string& shown) {
  if (i < 0 || n < 1 || i >= n)
    bad("expected I/N with 0 <= I < N (e.g. 0/4), got '" + shown + "'" + (source.empty() ? "" : " from " + source));
  return {i, n, source};
}

Shard from_text(const std::string& s, const std::string& source) {
  const auto slash = s.find('/');
  if (slash == std::string::npos) return checked(-1, 0, source, s);
  return checked(whole(s.substr(0, slash).c_str()), whole(s.substr(slash + 1).c_str()), source, s);
}

}  // namespace

Shard parse_shard(const std::string& value, const std::function<const char*(const char*)>& getenv) {
  if (value != "auto") return from_text(value, "--shard");
  auto var = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v ? v : "";
  };
  auto both = [&](const char* a, const char* b) { return var(a) + ", " + b + "=" + var(b); };
  if (const std::string s = var("ATTNCHECK_SHARD"); !s.empty()) return from_text(s, "ATTNCHECK_SHARD");
  // Slurm job array (sbatch --array=MIN-MAX): the task id counts from the array's first index; the count is
  // SLURM_ARRAY_TASK_COUNT, or MAX - MIN + 1 where only MAX is set. A stepped array (--array=0-15:4) has ids that
  // are not consecutive: COUNT then disagrees with MAX - MIN + 1, and the shard must come from ATTNCHECK_SHARD.
  if (getenv("SLURM_ARRAY_TASK_ID")) {
    const int64_t id = whole(getenv("SLURM_ARRAY_TASK_ID")), lo = whole(getenv("SLURM_ARRAY_TASK_MIN")),
                  hi = whole(getenv("SLURM_ARRAY_TASK_MAX")), count = whole(getenv("SLURM_ARRAY_TASK_COUNT"));
    const std::string shown = "SLURM_ARRAY_TASK_ID=" + var("SLURM_ARRAY_TASK_ID") +
                              ", SLURM_ARRAY_TASK_MIN=" + var("SLURM_ARRAY_TASK_MIN") +
                              ", SLURM_ARRAY_TASK_MAX=" + var("SLURM_ARRAY_TASK_MAX") +
                              ", SLURM_ARRAY_TASK_COUNT=" + var("SLURM_ARRAY_TASK_COUNT");
    if (lo < 0) bad("auto: a Slurm job array needs a whole SLURM_ARRAY_TASK_MIN (" + shown + ")");
    if (count < 0 && hi < lo)
      bad("auto: a Slurm job array needs SLURM_ARRAY_TASK_COUNT or SLURM_ARRAY_TASK_MAX >= "
          "SLURM_ARRAY_TASK_MIN (" +
          shown + ")");
    if (count >= 0 && hi >= lo && hi - lo + 1 != count)
      bad("auto: the Slurm array's task ids are not consecutive (a stepped --array): set ATTNCHECK_SHARD=I/N (" +
          shown + ")");
    return checked(id < 0 ? -1 : id - lo, count >= 0 ? count : hi - lo + 1,
                   count >= 0 ? "SLURM_ARRAY_TASK_ID, _MIN, _COUNT" : "SLURM_ARRAY_TASK_ID, _MIN, _MAX", shown);
  }
  // GitLab CI `parallel: N`: CI_NODE_INDEX counts from 1.
  if (getenv("CI_NODE_INDEX")) {
    const int64_t i = whole(getenv("CI_NODE_INDEX")), n = whole(getenv("CI_NODE_TOTAL"));
    return checked(i < 1 ? -1 : i - 1, n, "CI_NODE_INDEX, CI_NODE_TOTAL",
                   "CI_NODE_INDEX=" + both("CI_NODE_INDEX", "CI_NODE_TOTAL"));
  }
  // Kubernetes Indexed Job: the pod's index is JOB_COMPLETION_INDEX; the count (spec.completions) is not in the
  // environment, so the job passes it as ATTNCHECK_SHARD_COUNT.
  if (getenv("JOB_COMPLETION_INDEX")) {
    if (!getenv("ATTNCHECK_SHARD_COUNT"))
      bad("auto: JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but ATTNCHECK_SHARD_COUNT is not: set it to "
          "the job's spec.completions");
    return checked(whole(getenv("JOB_COMPLETION_INDEX")), whole(getenv("ATTNCHECK_SHARD_COUNT")),
                   "JOB_COMPLETION_INDEX, ATTNCHECK_SHARD_COUNT",
                   "JOB_COMPLETION_INDEX=" + both("JOB_COMPLETION_INDEX", "ATTNCHECK_SHARD_COUNT"));
  }
  bad("auto: no scheduler's shard variables are set (looked for ATTNCHECK_SHARD, SLURM_ARRAY_TASK_ID, "
      "CI_NODE_INDEX and JOB_COMPLETION_INDEX; docs/sharding.md)");
}

void add_shard_option(CLI::App& sub, std::optional<std::string>& value) {
  sub.add_option("--shard", value,
                 "Run shard I of N (0-based), e.g. 0/4, or auto: from the batch scheduler's "
                 "variables (Slurm array, GitLab parallel, Kubernetes Indexed Job, ATTNCHECK_SHARD; "
                 "docs/sharding.md); `attncheck merge` joins the shards' reports");
}

std::optional<Shard> resolve_shard(const std::optional<std::string>& value) {
  if (!value) return std::nullopt;  // given, even empty: '' is an error, not "no sharding"
  return parse_shard(*value, [](const char* n) { return std::getenv(n); });
}

void announce_shard(const Shard& s, size_t units, const char* what, std::FILE* to) {
  std::fprintf(to, "shard %lld/%lld (%s): %zu %s\n", static_cast<long long>(s.index), static_cast<long long>(s.count),
               s.source.c_str(), units, what);
}

std::vector<Merger>& mergers() {
  static std::vector<Merger> m;
  return m;
}

}  // namespace attncheck::cli
