// The malformed-input catalogue (label hostile): damaged copies of valid golden fixtures and of a valid
// candidate, made at test time with the HDF5 C API and by editing bytes, each run through every verb that reads it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace attncheck::catalogue {

enum class Want {
  refused,   // exit 2 naming the file and one of `expect`
  any,       // no crash, no hang, exit 0/1/2 (exit 2 names the file): a bit flip may land in a value, and a
             // legitimate new value (a softcap of 1e300) is another problem, which verify then fails
  accepted,  // exit 0 everywhere: an informational attribute (golden/SCHEMA.md) or one this fixture does not use
};

struct Case {
  std::string kind;  // "truncation", "attribute/missing", ...
  std::string name;  // unique within the catalogue, e.g. "attribute/missing/Lq"
  std::filesystem::path file;
  bool candidate = false;  // the damaged file is a candidate (partner is the good fixture)
  bool regular = true;     // a regular file (verify lists only those)
  // The error must name one of these (a field, a dataset, an attribute); empty: the file's path is enough.
  std::vector<std::string> expect;
  Want want = Want::refused;
  std::filesystem::path partner;  // the good candidate of a damaged fixture, the good fixture of a candidate
};

// The good inputs every case starts from, copied into `dir`.
struct Sources {
  std::filesystem::path plain;           // fp32 plain fixture with weights
  std::filesystem::path rich;            // BSHD, causal, padding, mask, bias, window, softcap, dropout
  std::filesystem::path candidate;       // a valid candidate for `plain` (/actual/out, lse, weights)
  std::filesystem::path rich_candidate;  // and for `rich`
};
Sources make_sources(const std::filesystem::path& dir);

// Each builder writes its cases under dir / <kind> and returns them.
std::vector<Case> truncations(const Sources& s, const std::filesystem::path& dir);
std::vector<Case> bit_flips(const Sources& s, const std::filesystem::path& dir);
std::vector<Case> attributes(const Sources& s, const std::filesystem::path& dir);
std::vector<Case> datasets(const Sources& s, const std::filesystem::path& dir);
std::vector<Case> shapes_and_bombs(const Sources& s, const std::filesystem::path& dir);
std::vector<Case> storage(const Sources& s, const std::filesystem::path& dir);
std::vector<Case> candidates(const Sources& s, const std::filesystem::path& dir);
std::vector<Case> modifications(const std::filesystem::path& dir);
std::vector<Case> kv_caches(const std::filesystem::path& dir);

}  // namespace attncheck::catalogue
