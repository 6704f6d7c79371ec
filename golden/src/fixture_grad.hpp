// The gradient part of the fixture writer and reader (golden/SCHEMA.md "Gradients"): /inputs/dout and the reference
// gradients with their error scales in /expected, present iff the root attribute `gradients` is 1.
#pragma once

#include <hdf5.h>

#include "attncheck/fixture.hpp"
#include "h5.hpp"

namespace attncheck::fixture_detail {

void write_gradients_attr(hid_t root, const Fixture& f);
void write_gradient_inputs(hid_t inputs, const Fixture& f);
void write_gradient_expected(hid_t expected, const Fixture& f);
// Reads the `gradients` attribute into f.has_gradients (header) and, with `data`, the datasets it declares;
// refuses datasets it does not declare and a total beyond `cap` bytes.
void read_gradients(const h5::Reader& r, hid_t file, Fixture& f, bool data, uint64_t cap);

}  // namespace attncheck::fixture_detail
