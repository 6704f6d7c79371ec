// Until the fixture library lands, a failing case is reported by its spec string (enough to rebuild it exactly).
#include "regression.hpp"

namespace attncheck::prop {

std::string write_regression(const Case&, const std::string&, const std::string&, const std::string&, uint64_t) {
  return "";
}

}  // namespace attncheck::prop
