// verify's row for a merge fixture (docs/states.md).
#pragma once

#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "attncheck/state_fixture.hpp"
#include "case_result.hpp"

namespace attncheck::verify {

// One verify row: `impl`'s merge of the fixture's states judged by the derived bound (docs/states.md). With
// `diagnosis`, a failure's likely cause is appended (merge diagnosis tags) and its lines written there.
CaseResult merge_row(const Impl& impl, const Support& available, const MergeFixture& f, const std::string& file,
                     std::vector<std::string>* diagnosis);

}  // namespace attncheck::verify
