// The CPU backends' hot kernels, compiled by Google Highway for several x86 targets (EMU128, SSSE3, SSE4, AVX2,
// AVX3 = AVX-512, AVX3_DL) in one binary and dispatched at run time to the best one the CPU has, or to the one
// named by ATTNCHECK_ISA. Everything is templated on float and double (the compute types of cpu and cpu-flash).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attncheck::cpu::simd {

// ---- target selection -------------------------------------------------------------------------------------
// Applies ATTNCHECK_ISA (a target name from runnable_targets(), case-insensitive) once per process; throws
// std::invalid_argument naming the variable and its value when the name is unknown or this CPU cannot run it.
// The CPU implementations call it at the start of every run (through strip_width), so the first run fixes it.
void select_target();
// Name of the target the kernels dispatch to ("avx2", "avx3", ...), after select_target().
std::string target();
// Targets compiled into this binary, best first, and the subset this CPU can run.
std::vector<std::string> compiled_targets();
std::vector<std::string> runnable_targets();

// ---- GEMM on packed panels ----------------------------------------------------------------------------------
// Columns per packed strip: two vectors of T on the chosen target (8/16/32 floats for SSE/AVX2/AVX-512).
template <class T>
int64_t strip_width();

// C[m x n] (+)= A[m x k] · B[k x n]. A is row-major with row stride lda. B is read in strips of W =
// strip_width<T>() columns: strip s (columns s·W .. s·W+W) starts at B + s·bstride, its row p at + p·ldb (packed
// panels: ldb = W; a row-major matrix whose row stride ldb is a multiple of W: bstride = W).
// C has row stride ldc >= ceil(n / W)·W: whole strips are written, columns past n get the padding's values.
template <class T>
void gemm(int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const T* B, int64_t bstride, int64_t ldb, T* C,
          int64_t ldc, bool accumulate);
// C[i][j] = Σ_p A[i][p]·B[j][p] for row-major A (m x k) and B (n x k): a few query rows against key rows as they
// lie in memory (decode), no transposed panel needed.
template <class T>
void gemm_nt(int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc);

// The same two on B given as 16-bit floats (bf16 or fp16 bit patterns, T = float), widened in registers as they are
// loaded: the same bits as gemm / gemm_nt on a widened copy of B, without writing or reading that copy (decode
// reads each K/V element once, so the copy was most of its memory traffic).
enum class Half16 { bf16, f16 };
void gemm_half(Half16 t, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint16_t* B,
               int64_t bstride, int64_t ldb, float* C, int64_t ldc, bool accumulate);
void gemm_nt_half(Half16 t, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint16_t* B,
                  int64_t ldb, float* C, int64_t ldc);

// The same two on B given as the 8-bit codes of a quantized KV cache (int8, or fp8 through a table of the 256 code
// values), dequantised in registers as they are loaded, never into a copy: element e of B row r is
// fl32(code · scale), scale = scales[r·groups + e / group] (groups = 1: one scale per row), the float a dequantised
// copy would hold, so the same bits as gemm / gemm_nt on that copy. B rows are ldb bytes apart (gemm_codes: strips
// W apart, bstride = W); `scales` is row 0's.
struct Codes8 {
  const float* lut = nullptr;     // fp8: each code's value; nullptr: int8 codes
  int64_t groups = 1, group = 0;  // scale groups per row and elements per group
  const int32_t* gidx = nullptr;  // e / group for every element e of a row, where group is not a multiple of the
                                  // vector length (a per-lane gather of the scales); nullptr otherwise
};
void gemm_codes(const Codes8& c, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint8_t* B,
                int64_t ldb, const float* scales, float* C, int64_t ldc, bool accumulate);
void gemm_nt_codes(const Codes8& c, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const uint8_t* B,
                   int64_t ldb, const float* scales, float* C, int64_t ldc);
// dst (n rows of k floats, contiguous) = those values of n rows of codes, as the two above read them.
void dequantize_codes(const Codes8& c, const uint8_t* B, int64_t ldb, const float* scales, int64_t n, int64_t k,
                      float* dst);
// Vector lengths of float on the selected target (Codes8::gidx is needed where group is not a multiple of it).
int64_t float_lanes();

// ---- AVX512-BF16 (bf16_dot.cpp) -------------------------------------------------------------------------------
// Target "avx3_bf16": the best AVX-512 target plus one kernel on vdpbf16ps for Q·Kᵀ of bf16 inputs. Chosen by
// default when the CPU has AVX512-BF16; ATTNCHECK_ISA=avx3_bf16 forces it, any other name turns it off.
bool bf16_dot();           // whether it is the selected target (after select_target())
bool bf16_dot_runnable();  // whether this CPU has AVX512-BF16 (and this binary the kernel)
bool bf16_dot_compiled();  // whether this binary has the kernel (x86-64, GCC or Clang)
// src[0..k) (bf16 values widened to float) as bf16 pairs: word p = bits(src[2p]) | bits(src[2p+1]) << 16, k odd
// padded with 0, words `stride` apart. Returns false if a value is subnormal in bf16: vdpbf16ps reads those as 0.
bool pack_bf16_pairs(const float* src, int64_t k, uint32_t* dst, int64_t stride);
// C[m x n] = A · B as gemm<float>() (B in strips of 32 columns, not accumulating), on bf16 pairs (A rows of kp
// words lda apart, B strip s at + s·bstride with pair row p at + p·ldb): products exact, fp32 accumulation (the
// default bf16 contract's qk=bf16, acc=fp32). Results below the smallest normal float are flushed to 0 (the
// instruction's FTZ). Throws std::logic_error unless bf16_dot().
void gemm_bf16_pairs(int64_t m, int64_t n, int64_t kp, const uint32_t* A, int64_t lda, const uint32_t* B,
                     int64_t bstride, int64_t ldb, float* C, int64_t ldc);
// Calls of gemm_bf16_pairs so far in this process (tests: that the CPU implementations take, or fall back
// from, the kernel).
int64_t bf16_dot_calls();

// ---- softmax pieces -------------------------------------------------------------------------------------------
// y[j] = exp(x[j]) with Highway's vectorised exp (documented max error 1 ulp; tests/cpu measures it over the whole
// argument range), exactly 0 below the smallest normal number and NaN for NaN.
template <class T>
void exp(const T* x, T* y, int64_t n);
// dst[j] = exp(src[j] - m) as above (dst may alias src); returns the sum in a fixed order.
template <class T>
T exp_shifted(const T* src, T* dst, int64_t n, T m);
// exp_shifted in place on rows r < nr of s (row stride ld, n values each) with m[r], the sums into sums[r]: the same
// bits as one exp_shifted per row, in one call.
template <class T>
void exp_shifted_rows(T* s, int64_t ld, int64_t nr, int64_t n, const T* m, T* sums);
// max(m, s[0..n)), NaN elements skipped (as std::max(m, x)).
template <class T>
T row_max(const T* s, int64_t n, T m);
// s[j] *= scale for j < n; returns the max of the results (NaN skipped, -inf when none).
template <class T>
T scale_max(T* s, int64_t n, T scale);

// ---- conversions ----------------------------------------------------------------------------------------------
// dst[j] = float(src[j]) for n contiguous bf16 / fp16 bit patterns (exact widening).
void widen_bf16(const uint16_t* src, float* dst, int64_t n);
void widen_f16(const uint16_t* src, float* dst, int64_t n);
// dst[j] = float_to_bf16_bits(src[j]) (round to nearest even, NaN quieted), bit for bit.
void narrow_bf16(const float* src, uint16_t* dst, int64_t n);

// ---- peak ----------------------------------------------------------------------------------------------------
// fma_chains(iters) runs iters rounds of independent fp32 fused multiply-adds in the widest vectors (the bench's
// FMA peak); each round is fma_flops_per_iter() FLOPs. The result only keeps the work from being optimised away.
int64_t fma_flops_per_iter();
float fma_chains(int64_t iters);

}  // namespace attncheck::cpu::simd
