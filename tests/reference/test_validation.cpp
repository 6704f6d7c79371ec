// One test per validation rule of validate(Problem), validate(Problem, Inputs) and the string parsers: each must
// throw std::invalid_argument whose message names the field and the offending value(s). Nothing may abort.
#include <functional>
#include <limits>

#include "tiny.hpp"

using namespace attncheck;

namespace {
void expect_invalid(const std::function<void()>& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning " << *needles.begin();
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

Problem base() {
  Problem p;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 3, p.Lk = 5, p.Dqk = 4, p.Dv = 6;
  return p;
}

void expect_problem_invalid(const std::function<void(Problem&)>& edit, std::initializer_list<std::string> needles) {
  Problem p = base();
  edit(p);
  expect_invalid([&] { validate(p); }, needles);
}

Inputs inputs_for(const Problem& p) {
  return Inputs{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
}

void expect_inputs_invalid(const Problem& p, const std::function<void(Inputs&)>& edit,
                           std::initializer_list<std::string> needles) {
  Inputs in = inputs_for(p);
  edit(in);
  expect_invalid([&] { validate(p, in); }, needles);
  expect_invalid([&] { reference_attention(p, in); }, needles);  // the reference validates too
}
}  // namespace

TEST(Validation, BaseProblemAndInputsAreValid) {
  EXPECT_NO_THROW(validate(base()));
  EXPECT_NO_THROW(validate(base(), inputs_for(base())));
}

TEST(Validation, ExtentsMustBePositive) {
  int64_t Problem::*fields[] = {&Problem::B,  &Problem::Hq,  &Problem::Hkv, &Problem::Lq,
                                &Problem::Lk, &Problem::Dqk, &Problem::Dv};
  const char* names[] = {"B", "Hq", "Hkv", "Lq", "Lk", "Dqk", "Dv"};
  for (int f = 0; f < 7; ++f) {
    expect_problem_invalid([&](Problem& p) { p.*fields[f] = 0; }, {std::string(names[f]) + " must be >= 1", "got 0"});
    expect_problem_invalid([&](Problem& p) { p.*fields[f] = -3; }, {names[f], "got -3"});
  }
}

TEST(Validation, HqMustBeAMultipleOfHkv) {
  expect_problem_invalid([](Problem& p) { p.Hq = 6, p.Hkv = 4; }, {"Hq", "Hkv", "Hq=6", "Hkv=4"});
  expect_problem_invalid([](Problem& p) { p.Hq = 2, p.Hkv = 4; }, {"Hq=2", "Hkv=4"});
}

TEST(Validation, DtypeMustBeFloating) {
  expect_problem_invalid([](Problem& p) { p.dtype = DType::u8; }, {"dtype", "u8"});
}

TEST(Validation, ScaleMustBeFinite) {
  expect_problem_invalid([](Problem& p) { p.scale = std::nan(""); }, {"scale", "nan"});
  expect_problem_invalid([](Problem& p) { p.scale = -INFINITY; }, {"scale", "-inf"});
}

TEST(Validation, KeyLengthsNeedOnePerBatch) {
  expect_problem_invalid([](Problem& p) { p.key_lengths = {5}; }, {"key_lengths", "B=2", "got 1"});
}

TEST(Validation, KeyLengthsMustBeWithinLk) {
  expect_problem_invalid([](Problem& p) { p.key_lengths = {5, 6}; }, {"key_lengths[1]", "Lk=5", "got 6"});
  expect_problem_invalid([](Problem& p) { p.key_lengths = {-1, 5}; }, {"key_lengths[0]", "got -1"});
}

TEST(Validation, PerBatchOffsetsNeedExplicitAlignment) {
  expect_problem_invalid(
      [](Problem& p) {
        p.causal = true, p.causal_offsets = {1, 2};
      },
      {"causal_offsets", "alignment=top_left"});
  expect_problem_invalid(
      [](Problem& p) {
        p.alignment = Alignment::bottom_right, p.causal_offsets = {1, 2};
      },
      {"causal_offsets", "alignment=bottom_right"});
}

TEST(Validation, PerBatchOffsetsNeedOnePerBatch) {
  expect_problem_invalid(
      [](Problem& p) {
        p.alignment = Alignment::explicit_, p.causal_offsets = {1, 2, 3};
      },
      {"causal_offsets", "B=2", "got 3"});
}

TEST(Validation, MaskShapeMustBroadcast) {
  expect_problem_invalid(
      [](Problem& p) {
        p.mask_shape = std::array<int64_t, 4>{1, 1, 2, 5};
      },
      {"mask", "[1,1,2,5]", "(Lq) is 2", "expected 1 or 3"});
  expect_problem_invalid(
      [](Problem& p) {
        p.mask_shape = std::array<int64_t, 4>{2, 2, 1, 1};
      },
      {"mask", "(Hq) is 2", "expected 1 or 4"});
}

TEST(Validation, BiasShapeMustBroadcast) {
  expect_problem_invalid(
      [](Problem& p) {
        p.bias_shape = std::array<int64_t, 4>{3, 1, 1, 5};
      },
      {"bias", "[3,1,1,5]", "(B) is 3", "expected 1 or 2"});
  expect_problem_invalid(
      [](Problem& p) {
        p.bias_shape = std::array<int64_t, 4>{1, 1, 1, 0};
      },
      {"bias", "(Lk) is 0", "expected 1 or 5"});
}

TEST(Validation, BiasDtypeMustBeFloating) {
  expect_problem_invalid(
      [](Problem& p) {
        p.bias_shape = std::array<int64_t, 4>{1, 1, 1, 1}, p.bias_dtype = DType::u8;
      },
      {"bias_dtype", "u8"});
}

TEST(Validation, WindowsMustBeUnboundedOrNonNegative) {
  expect_problem_invalid([](Problem& p) { p.window_left = -2; }, {"window_left", "got -2"});
  expect_problem_invalid([](Problem& p) { p.window_right = -5; }, {"window_right", "got -5"});
}

TEST(Validation, SoftcapMustBeFiniteNonNegative) {
  expect_problem_invalid([](Problem& p) { p.softcap = -1; }, {"softcap", "got -1"});
  expect_problem_invalid([](Problem& p) { p.softcap = INFINITY; }, {"softcap", "got inf"});
  expect_problem_invalid([](Problem& p) { p.softcap = std::nan(""); }, {"softcap", "got nan"});
}

TEST(Validation, FiniteFillNeedsFiniteValue) {
  expect_problem_invalid([](Problem& p) { p.fill = MaskFill::finite, p.fill_value = -INFINITY; },
                         {"fill_value", "-inf"});
}

TEST(Validation, DropoutProbabilityInHalfOpenUnitInterval) {
  expect_problem_invalid([](Problem& p) { p.dropout_p = 1.0; }, {"dropout_p", "[0, 1)", "got 1.0"});
  expect_problem_invalid([](Problem& p) { p.dropout_p = -0.25; }, {"dropout_p", "got -0.25"});
  expect_problem_invalid([](Problem& p) { p.dropout_p = std::nan(""); }, {"dropout_p", "got nan"});
}

TEST(Validation, QkvDtypeMustMatchProblem) {
  Problem p = base();
  p.dtype = DType::f16;
  expect_inputs_invalid(p, [](Inputs& in) { in.q = Tensor(DType::f32, {2, 4, 3, 4}); }, {"q dtype", "fp16", "fp32"});
}

TEST(Validation, QkvShapeMustMatchProblem) {
  expect_inputs_invalid(base(),
                        [](Inputs& in) {
                          in.k = Tensor(DType::f32, {2, 4, 5, 4});
                        },
                        {"k shape", "[2,2,5,4]", "[2,4,5,4]"});
  expect_inputs_invalid(base(),
                        [](Inputs& in) {
                          in.v = Tensor(DType::f32, {2, 2, 5, 4});
                        },
                        {"v shape", "[2,2,5,6]", "[2,2,5,4]"});
}

TEST(Validation, TensorBytesMustMatchShape) {
  expect_inputs_invalid(base(), [](Inputs& in) { in.v.bytes.resize(8); }, {"v holds 8 bytes", "expected 480"});
}

TEST(Validation, TensorStridesMustStayInside) {
  expect_inputs_invalid(base(), [](Inputs& in) { in.q.strides.pop_back(); }, {"q strides", "[48,12,4]", "[2,4,3,4]"});
  expect_inputs_invalid(base(), [](Inputs& in) { in.q.strides[3] = -1; }, {"q strides", ">= 0", "dim 3 is -1"});
  expect_inputs_invalid(base(), [](Inputs& in) { in.k.strides[0] = 100; },
                        {"k strides", "[100,20,4,1]", "reach element 139", "80"});
}

TEST(Validation, MaskPresenceMustMatchProblem) {
  Problem p = base();
  p.mask_shape = std::array<int64_t, 4>{1, 1, 1, 5};
  expect_inputs_invalid(p, [](Inputs&) {}, {"mask", "declares", "have none"});
  expect_inputs_invalid(base(),
                        [](Inputs& in) {
                          in.mask = Tensor(DType::u8, {1, 1, 1, 5});
                        },
                        {"mask", "does not declare", "have one"});
}

TEST(Validation, MaskTensorMustMatchDeclaredShapeAndBeU8) {
  Problem p = base();
  p.mask_shape = std::array<int64_t, 4>{1, 1, 1, 5};
  expect_inputs_invalid(p,
                        [](Inputs& in) {
                          in.mask = Tensor(DType::f32, {1, 1, 1, 5});
                        },
                        {"mask dtype", "u8", "fp32"});
  expect_inputs_invalid(p,
                        [](Inputs& in) {
                          in.mask = Tensor(DType::u8, {1, 1, 3, 5});
                        },
                        {"mask shape", "[1,1,1,5]", "[1,1,3,5]"});
}

TEST(Validation, BiasPresenceMustMatchProblem) {
  Problem p = base();
  p.bias_shape = std::array<int64_t, 4>{1, 1, 1, 5};
  expect_inputs_invalid(p, [](Inputs&) {}, {"bias", "declares", "have none"});
  expect_inputs_invalid(base(),
                        [](Inputs& in) {
                          in.bias = Tensor(DType::f32, {1, 1, 1, 5});
                        },
                        {"bias", "does not declare", "have one"});
}

TEST(Validation, BiasTensorMustMatchDeclaredShapeAndDtype) {
  Problem p = base();
  p.bias_shape = std::array<int64_t, 4>{2, 1, 1, 5};
  p.bias_dtype = DType::bf16;
  expect_inputs_invalid(p,
                        [](Inputs& in) {
                          in.bias = Tensor(DType::f32, {2, 1, 1, 5});
                        },
                        {"bias dtype", "bf16", "fp32"});
  expect_inputs_invalid(p,
                        [](Inputs& in) {
                          in.bias = Tensor(DType::bf16, {1, 1, 1, 5});
                        },
                        {"bias shape", "[2,1,1,5]", "[1,1,1,5]"});
}

TEST(Validation, KeepMaskPresentExactlyWithDropout) {
  Problem p = base();
  p.dropout_p = 0.5;
  expect_inputs_invalid(p, [](Inputs&) {}, {"keep", "dropout_p=0.5", "no keep-mask"});
  expect_inputs_invalid(base(),
                        [](Inputs& in) {
                          in.keep = Tensor(DType::u8, {2, 4, 3, 5});
                        },
                        {"keep", "dropout_p=0.0", "have a keep-mask"});
}

TEST(Validation, KeepMaskMustBeFullU8) {
  Problem p = base();
  p.dropout_p = 0.5;
  expect_inputs_invalid(p,
                        [](Inputs& in) {
                          in.keep = Tensor(DType::u8, {2, 1, 3, 5});
                        },
                        {"keep shape", "[2,4,3,5]", "[2,1,3,5]"});
  expect_inputs_invalid(p, [](Inputs& in) { in.keep = Tensor(DType::f32, {2, 4, 3, 5}); }, {"keep dtype", "u8"});
}

TEST(Validation, ParsersNameTheUnknownValue) {
  expect_invalid([] { dtype_from_string("fp8"); }, {"dtype", "'fp8'"});
  expect_invalid([] { layout_from_string("SBHD"); }, {"layout", "'SBHD'"});
  expect_invalid([] { alignment_from_string("center"); }, {"alignment", "'center'"});
  expect_invalid([] { fill_from_string("zero"); }, {"fill", "'zero'"});
  expect_invalid([] { fully_masked_from_string("inf"); }, {"fully_masked", "'inf'"});
}

TEST(Validation, TensorRejectsNegativeExtent) {
  expect_invalid([] { Tensor t(DType::f32, {2, -1}); }, {"tensor shape", "[2,-1]"});
}

// Element counts are products of int64 fields: an overflowing product must be an error, not a wrapped-around
// small tensor (it made `attncheck generate` segfault on a spec with B = Hq = Hkv = 2^32).
TEST(Validation, TensorSizesMustNotOverflow) {
  expect_problem_invalid([](Problem& p) { p.B = p.Hq = p.Hkv = int64_t{1} << 32; },
                         {"q elements B*Hq*Lq*Dqk exceed 2^60", "B=4294967296", "Hq=4294967296"});
  expect_problem_invalid([](Problem& p) { p.Lq = p.Lk = int64_t{1} << 31; },
                         {"weights elements B*Hq*Lq*Lk exceed 2^60", "Lq=2147483648", "Lk=2147483648"});
  expect_problem_invalid([](Problem& p) { p.Hq = p.Hkv = 4, p.Lk = int64_t{1} << 40, p.Dv = int64_t{1} << 20; },
                         {"v elements B*Hkv*Lk*Dv exceed 2^60", "Dv=1048576"});
  Problem big = base();  // just under the bound is valid (it only has to be representable, not allocatable)
  big.B = 1, big.Hq = big.Hkv = 1, big.Lq = big.Lk = int64_t{1} << 30, big.Dqk = big.Dv = 1;
  EXPECT_NO_THROW(validate(big));
}

// i + offset +- window must not overflow: with window_right = INT64_MAX the reference masked every key of rows
// i >= 1 (out 0 instead of the mean of the visible values), a silently wrong answer.
TEST(Validation, OffsetsAndWindowsMustBeWithinTwoToTheSixty) {
  const int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
  expect_problem_invalid([&](Problem& p) { p.window_right = max; }, {"window_right", "2^60", std::to_string(max)});
  expect_problem_invalid([&](Problem& p) { p.window_left = max; }, {"window_left", std::to_string(max)});
  expect_problem_invalid([&](Problem& p) { p.alignment = Alignment::explicit_, p.causal_offset = max; },
                         {"causal_offset", std::to_string(max)});
  expect_problem_invalid(
      [&](Problem& p) {
        p.alignment = Alignment::explicit_, p.causal_offsets = {0, min};
      },
      {"causal_offsets[1]", std::to_string(min)});
  Problem ok = base();  // a bound far beyond any sequence still means "unbounded" and is accepted
  ok.window_left = ok.window_right = int64_t{1} << 60;
  ok.alignment = Alignment::explicit_, ok.causal_offset = -(int64_t{1} << 60);
  EXPECT_NO_THROW(validate(ok));
}

TEST(Validation, TensorRejectsOverflowingShapeAndBadStorageOrder) {
  expect_invalid(
      [] {
        Tensor t(DType::f32, {int64_t{1} << 30, int64_t{1} << 30, int64_t{1} << 30});
      },
      {"tensor shape", "[1073741824,1073741824,1073741824]", "fp32", "2^63 bytes"});
  expect_invalid([] { Tensor t(DType::f32, {2, 3}, {0, 5}); }, {"storage_order", "permutation", "[0,5]"});
  expect_invalid([] { Tensor t(DType::f32, {2, 3}, {1, 1}); }, {"storage_order", "[1,1]"});
  expect_invalid([] { Tensor t(DType::f32, {2, 3, 4}, {1, 0}); }, {"storage_order", "[2,3,4]", "[1,0]"});
  const Tensor t(DType::f32, {2, 3}, {1, 0});  // a valid permutation: column-major
  EXPECT_EQ(t.strides, (std::vector<int64_t>{1, 2}));
}
