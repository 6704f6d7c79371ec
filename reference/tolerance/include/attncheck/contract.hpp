// The precision contract an implementation declares: in which precision the operands of Q·Kᵀ and P·V enter,
// where scores live, what accumulates, whether P is rounded before P·V, which exp. The tolerance model bounds
// exactly the declared computation (docs/tolerance.md); nothing coarser is admitted silently.
#pragma once

#include <string>

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace tolerance {

// Floating-point formats a contract can name. tf32: fp32 range with a 10-bit mantissa (tensor-core operands).
enum class Precision : uint8_t { fp64, fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2 };

const char* to_string(Precision p);
Precision precision_from_string(const std::string& s);  // the names above ("fp64", ..., "fp8_e5m2"); throws otherwise
double unit_roundoff(Precision p);                      // 2^-53, 2^-24, 2^-11, 2^-11, 2^-8, 2^-4, 2^-3
Precision precision_of(DType t);                        // f64 -> fp64, ...; throws for u8

// exp: exp(s - m) in the accumulation precision. exp2: 2^(s*log2(e) - m*log2(e)) with log2(e) folded into the
// scale (FlashAttention's exp2f path); the folded multiply adds one rounding of |s|, which the model includes.
enum class ExpFlavour : uint8_t { exp, exp2 };

// How a kernel computes the rotary embedding's cos and sin (problems with rotary_dim > 0; docs/tolerance.md
// "Rotary angles"). exact: as the reference (the rotated q and k are then only rounded to the qk operand format).
// fp32: angle = fl32(position * fl32(inv_freq)), cos/sin in fp32. table_*: cos/sin from such fp32 angles, stored
// in a table of fp32, fp16 or bf16 values (FlashAttention's rotary_cos/sin, Hugging Face's cos/sin cache).
enum class RopeMath : uint8_t { exact, fp32, table_fp32, table_fp16, table_bf16 };
const char* to_string(RopeMath r);  // "exact", "fp32-angles", "table-fp32", "table-fp16", "table-bf16"

struct PrecisionContract {
  Precision qk_operands = Precision::fp32;  // Q and K are rounded to this before Q·Kᵀ
  Precision scores = Precision::fp32;       // scores S (and the softmax inputs) are stored in this
  Precision pv_operands = Precision::fp32;  // V is rounded to this before P·V (and P too when p_rounded)
  Precision accumulate = Precision::fp32;   // every dot product, the softmax row sum and the P·V sums
  bool p_rounded = false;                   // P (unnormalised, as FlashAttention) rounded to pv_operands before P·V
  ExpFlavour exp = ExpFlavour::exp;
  RopeMath rope = RopeMath::exact;  // to_string() adds ",rope=..." only when not exact (older strings unchanged)

  // "qk=fp16,scores=fp32,pv=fp16,acc=fp32,p=rounded,exp=exp" (every field, this order; parsed back exactly).
  std::string to_string() const;
  bool operator==(const PrecisionContract&) const = default;
};

// Parses to_string()'s form. Fields may come in any order and may be omitted: omitted fields take the values of
// default_contract(dtype). Unknown keys or values throw std::invalid_argument naming the field and the value.
PrecisionContract contract_from_string(const std::string& s, DType dtype);

// What a fused kernel for this input dtype does (FlashAttention, cuDNN, every backend here):
//   fp64: everything fp64.  fp32: fp32 operands (never TF32 unless declared), fp32 scores and accumulation.
//   fp16/bf16: operands in the input dtype, fp32 scores and accumulation, P rounded to the input dtype for P·V.
//   fp8 e4m3/e5m2: the same with the fp8 format (FlashAttention-3 and cuDNN round P to fp8 for the P·V GEMM).
PrecisionContract default_contract(DType dtype);

// Throws std::invalid_argument (naming the field and the values) if the contract cannot describe a computation
// on this dtype: fp64 problems must be computed entirely in fp64; fp8 is an operand format only (never scores
// or accumulation). Coarse accumulation (fp16/bf16) may be declared; the bound then follows it, openly.
void validate_contract(const PrecisionContract& c, DType dtype);

}  // namespace tolerance
}  // namespace attncheck
