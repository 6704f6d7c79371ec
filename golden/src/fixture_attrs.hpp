// The Problem's part of a fixture, derived from the feature table (reference/model/include/attncheck/features.hpp):
// one root attribute per field (in table order) and one /inputs dataset per per-batch or per-head field.
#pragma once

#include "attncheck/fixture.hpp"
#include "attncheck/problem.hpp"
#include "h5.hpp"

namespace attncheck::fixture_detail {

// Provenance after schema_version and the name: the tool's version, the reference precision, the generator's seed
// and distribution, and the command (attention and module fixtures alike).
void write_provenance(hid_t root, const Provenance& pv);
void read_provenance(const h5::Reader& r, hid_t root, Provenance& pv);

void write_problem_attrs(hid_t root, const Problem& p);
void write_problem_datasets(hid_t inputs, const Problem& p);
// Attributes into p (datasets are read by read_problem_datasets once the shapes are validated).
void read_problem_attrs(const h5::Reader& r, hid_t root, Problem& p);
void read_problem_datasets(const h5::Reader& r, hid_t file, Problem& p);

}  // namespace attncheck::fixture_detail
