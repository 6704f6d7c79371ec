#include "sharding.hpp"

#include <nlohmann/json.hpp>

namespace attncheck::verify {

nlohmann::json unit_row(nlohmann::json row, const std::optional<Shard>& s, size_t unit) {
  if (s) row["unit"] = unit;
  return row;
}

void stamp_shard(nlohmann::json& report, const std::optional<Shard>& s, const std::string& verb, int indent) {
  if (s) report["shard"] = {{"verb", verb}, {"index", s->index}, {"count", s->count}, {"indent", indent}};
}

}  // namespace attncheck::verify
