// The precision contract: defaults per dtype, the string form round-trips, bad strings name the field.
#include <gtest/gtest.h>

#include <cmath>

#include "attncheck/contract.hpp"

namespace attncheck {
namespace {

TEST(Contract, DefaultsFollowTheDtype) {
  const PrecisionContract f32 = default_contract(DType::f32);
  EXPECT_EQ(f32.qk_operands, Precision::fp32);  // never TF32 unless declared
  EXPECT_EQ(f32.pv_operands, Precision::fp32);
  EXPECT_EQ(f32.accumulate, Precision::fp32);
  EXPECT_FALSE(f32.p_rounded);
  const PrecisionContract f16 = default_contract(DType::f16);
  EXPECT_EQ(f16.qk_operands, Precision::fp16);
  EXPECT_EQ(f16.scores, Precision::fp32);
  EXPECT_EQ(f16.accumulate, Precision::fp32);
  EXPECT_TRUE(f16.p_rounded);
  EXPECT_EQ(default_contract(DType::bf16).pv_operands, Precision::bf16);
  EXPECT_EQ(default_contract(DType::f64).accumulate, Precision::fp64);
  EXPECT_THROW(default_contract(DType::u8), std::invalid_argument);
}

TEST(Contract, StringRoundTripsEveryField) {
  PrecisionContract c = default_contract(DType::f32);
  c.qk_operands = Precision::tf32;
  c.scores = Precision::fp16;
  c.pv_operands = Precision::bf16;
  c.p_rounded = true;
  c.exp = ExpFlavour::exp2;
  EXPECT_EQ(c.to_string(), "qk=tf32,scores=fp16,pv=bf16,acc=fp32,p=rounded,exp=exp2");
  EXPECT_EQ(contract_from_string(c.to_string(), DType::f32), c);
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16})
    EXPECT_EQ(contract_from_string(default_contract(t).to_string(), t), default_contract(t));
}

TEST(Contract, OmittedFieldsTakeTheDtypeDefault) {
  const PrecisionContract c = contract_from_string("qk=tf32", DType::f32);
  PrecisionContract want = default_contract(DType::f32);
  want.qk_operands = Precision::tf32;
  EXPECT_EQ(c, want);
  EXPECT_EQ(contract_from_string("", DType::bf16), default_contract(DType::bf16));
}

TEST(Contract, BadStringsNameTheFieldAndValue) {
  auto message = [](const std::string& s, DType t) {
    try {
      contract_from_string(s, t);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("qk=fp12", DType::f32).find("'qk' has unknown precision 'fp12'"), std::string::npos);
  EXPECT_NE(message("colour=red", DType::f32).find("unknown field 'colour'"), std::string::npos);
  EXPECT_NE(message("p=maybe", DType::f32).find("'p' has unknown value 'maybe'"), std::string::npos);
  EXPECT_NE(message("acc", DType::f32).find("not key=value"), std::string::npos);
  EXPECT_NE(message("acc=fp32", DType::f64).find("acc=fp32"), std::string::npos);
  EXPECT_NE(message("acc=fp8_e4m3", DType::f16).find("cannot accumulate"), std::string::npos);
}

TEST(Contract, UnitRoundoffs) {
  EXPECT_EQ(unit_roundoff(Precision::tf32), std::ldexp(1.0, -11));
  EXPECT_EQ(unit_roundoff(Precision::bf16), unit_roundoff(DType::bf16));
  EXPECT_EQ(unit_roundoff(Precision::fp32), unit_roundoff(DType::f32));
  EXPECT_EQ(unit_roundoff(Precision::fp8_e4m3), 0.0625);
}

}  // namespace
}  // namespace attncheck
