// A failure's smallest repro written as an ordinary golden fixture (verify --diagnose --repro DIR): the reduced case
// (reduce.hpp), the reference's outputs for it, and in the provenance the diagnosis, the implementation and the
// original case, so `attncheck verify --fixtures DIR` replays it in milliseconds.
#pragma once

#include <string>

#include "attncheck/fixture.hpp"
#include "diagnosis.hpp"
#include "invariance.hpp"

namespace attncheck::diagnose {

// Reduces the failure of `impl` on `original` (diagnosed `d`, judged with `o.tolerance`) and writes the result to
// dir/<repro_impl_case>.h5 with the original fixture's tolerance model. Throws naming the path
// when the file cannot be written.
Repro write_repro(const Fixture& original, const Problem& judged, const Impl& impl, const Diagnosis& d,
                  const Options& o, const std::string& dir);

// The same for a violated invariance check (invariance.hpp): the case reduced while that check, run as `o` asks it
// (variants judged within `tolerance` where they are), still fails on it; `verify --fixtures DIR --invariance <kind>`
// replays it.
Repro write_invariance_repro(const Fixture& original, const Problem& judged, const Impl& impl,
                             const invariance::Check& failed, const invariance::Options& o,
                             const ToleranceModel& tolerance, const std::string& dir);

}  // namespace attncheck::diagnose
