// Benchmark machinery shared by `attncheck bench` and the Google Benchmark sweep: a random problem of a given
// shape, median timing of an implementation, the same-run SGEMM of equal FLOP count, the measured FMA peak, and
// extra peak RSS.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "attncheck/impl.hpp"

namespace attncheck::bench {

struct Shape {
  int64_t B = 1, H = 1, Lq = 1, Lk = 1, D = 1;
};
// "B,H,Lq,Lk,D" (five positive integers); throws std::invalid_argument naming the field otherwise.
Shape parse_shape(const std::string& s);

struct Config {
  Shape shape;
  DType dtype = DType::f32;
  bool causal = false;  // top-left (PyTorch is_causal)
  int threads = 1;
  int warmup = 1, reps = 5;
  bool backward = false;  // time run_backward (after one forward that saves lse) instead of the forward
  // A quantized KV cache, "<codes>:<granularity>" (kv_cache.hpp), e.g. "int8:block32", "fp8_e4m3:head"; "" = K and V
  // in dtype. The same values as the plain cache's, quantised.
  std::string kv_cache;
  int num_splits = 0;  // the schedule's num_splits (attncheck/schedule.hpp): a forced split-KV count; 0 = its choice
  // Absorbed MLA (mla.hpp): one latent KV head of D columns read as keys, its first mla_dv columns as values
  // (DeepSeek: D 576, mla_dv 512); 0 = off.
  int64_t mla_dv = 0;
  // A document mask of documents of doc_len tokens (doc_ids = j / doc_len; 0 = off), and a block mask
  // {q_block, kv_block} handed to the implementation (block_mask.hpp; {0, 0} = none), derived before timing.
  int64_t doc_len = 0;
  std::array<int64_t, 2> block_mask{0, 0};
};

// Attention FLOPs: 4·B·H·Lq·Lk·D (two GEMMs; with MLA 2·B·H·Lq·Lk·(D + mla_dv)); causal counts half; the backward 2.5
// times that (FlashAttention's convention: five GEMMs against the forward's two).
double attention_flops(const Config& c);

struct Result {
  double seconds = 0;       // median over reps
  double gflops = 0;        // attention_flops / seconds / 1e9
  double sgemm_gflops = 0;  // same-run square SGEMM of the same FLOP count, same thread count
  int64_t sgemm_n = 0;      // its size n (n x n times n x n)
  double ratio_to_sgemm = 0;
  double fma_peak_gflops = 0;   // same-run FMA throughput of the dispatched target (fma_peak_gflops())
  double fraction_of_peak = 0;  // gflops / fma_peak_gflops
  double extra_rss_bytes = -1;  // peak RSS during one run minus RSS before it (-1: could not be measured)
  // Process CPU seconds per run (median) and the ratio of CPU-time rates: on a loaded machine wall-clock rates
  // measure the neighbours, CPU time much less so. The wall-clock figures above stay the primary result.
  double cpu_seconds = 0, cpu_ratio_to_sgemm = 0;
  double forward_seconds = 0;  // with Config::backward: the forward's median in the same run
  // Memory side (the honest yardstick for decode, Lq = 1: a GEMV reads every K/V element for 2 FLOPs, so the SGEMM
  // ratio says little there). bytes: what the pass must at least move (Q, K, V read, O written, in the dtype;
  // the backward adds dO read and dQ, dK, dV written); gbytes_per_s = bytes / seconds; stream_gbytes_per_s: the
  // same-run read bandwidth of `threads` threads over a buffer far larger than the last-level cache;
  // fraction_of_bandwidth = gbytes_per_s / that. bound: "memory" when bytes / stream bandwidth exceeds FLOPs / FMA
  // peak (then fraction_of_bandwidth is the figure of merit), else "compute" (then ratio_to_sgemm).
  double bytes = 0, gbytes_per_s = 0, stream_gbytes_per_s = 0, fraction_of_bandwidth = 0;
  std::string bound;
  // Device implementations (Impl::last_device_seconds >= 0): the median of the kernels' CUDA-event time over the
  // same reps, and the rate it gives; -1 for host implementations. seconds stays the wall clock of the whole run.
  double device_seconds = -1, device_gflops = -1;
  std::string device_note;  // what ran, where the implementation chose it at run time (Impl's last_device_note)
  // With Config::block_mask: medians of runs without and with it, alternating in the same run (-1: not measured).
  double no_block_mask_seconds = -1, block_mask_seconds = -1;
};

// Times `impl` on a random signed problem of the configured shape (inputs and outputs allocated beforehand and
// not counted), then the SGEMM. Throws std::invalid_argument when the impl does not support the problem (or,
// with Config::backward, its backward).
Result run(const Impl& impl, const Config& c);

// Median wall-clock and process CPU seconds of an n x n x n SGEMM (the CPU backend's dispatched SIMD GEMM on a
// pre-packed B, rows split over `threads` threads).
std::pair<double, double> sgemm_seconds(int64_t n, int threads, int warmup, int reps);

// Measured read bandwidth in GB/s: `threads` threads each summing their slice of a 512 MiB buffer (median of 3).
double stream_gbytes_per_s(int threads);

// Measured FMA peak: `threads` threads each running independent fused multiply-add chains in the dispatched
// target's widest vectors (median of 3); the denominator of fraction_of_peak.
double fma_peak_gflops(int threads);

// The SIMD target the CPU kernels dispatch to ("avx2", "avx3", ...; ATTNCHECK_ISA forces one).
std::string isa();

// One JSON object with the fields documented in `attncheck bench --help`.
std::string to_json(const std::string& impl, const Config& c, const Result& r);

}  // namespace attncheck::bench
