#include "status.hpp"

#include <array>

namespace attncheck::verify {

namespace {
// Indexed by the enum's value; the order is the report order.
const std::array<std::string, 12> kSpelling = {
    "pass",    "fail",    "unsupported", "unavailable",    "finite-required", "error",
    "crashed", "timeout", "exited",      "modified-input", "out-of-bounds",   "input-error"};
}  // namespace

const std::vector<Status>& all_statuses() {
  static const std::vector<Status> all = [] {
    std::vector<Status> v;
    for (size_t k = 0; k < kSpelling.size(); ++k) v.push_back(static_cast<Status>(k));
    return v;
  }();
  return all;
}

const std::string& to_string(Status s) { return kSpelling.at(static_cast<size_t>(s)); }

std::optional<Status> status_from_string(std::string_view s) {
  for (size_t k = 0; k < kSpelling.size(); ++k)
    if (kSpelling[k] == s) return static_cast<Status>(k);
  return std::nullopt;
}

bool is_failure(Status s) {
  return s != Status::pass && s != Status::unsupported && s != Status::unavailable && s != Status::finite_required;
}

}  // namespace attncheck::verify
