// The machine-readable form of a diagnosis (the "diagnosis" object of verify/compare JSON reports).
#include <nlohmann/json.hpp>

#include "diagnosis.hpp"

namespace attncheck::diagnose {

std::string to_json(const Diagnosis& d) {
  using json = nlohmann::json;
  json causes = json::array(), probes = json::array();
  for (const Cause& c : d.causes) causes.push_back({{"tag", c.tag}, {"score", c.score}, {"evidence", c.evidence}});
  for (const ProbeResult& p : d.probes)
    probes.push_back({{"probe", p.name}, {"outcome", p.outcome}, {"detail", p.detail}});
  json j = {{"top", d.top()},   {"causes", causes},   {"anatomy", d.anatomy},
            {"probes", probes}, {"reruns", d.reruns}, {"rerun_budget", d.rerun_budget}};
  if (!d.tied.empty()) j["undetermined"] = d.tied;
  if (d.repro)
    j["repro"] = {{"before", d.repro->before},
                  {"after", d.repro->after},
                  {"top", d.repro->top},
                  {"reruns", d.repro->reruns},
                  {"path", d.repro->path}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace attncheck::diagnose
