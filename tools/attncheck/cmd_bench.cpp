// `attncheck bench`: times one implementation's forward pass (warm-up, repetitions, median) and, in the same run,
// an SGEMM of the same FLOP count and thread count; --json prints one object. The checks, the timing and the
// printing are harness/bench/bench_request.hpp; this file parses the options.
#include <cstdio>

#include "bench_request.hpp"
#include "command.hpp"
#include "plugins.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  bench::Request q;
  std::vector<std::string> plugins;
} g;

int run_bench() {
  load_plugins(g.plugins);
  return bench::run_request(g.q, stdout);
}

const Register reg{
    {"bench", "Time an implementation against a same-run SGEMM of equal FLOPs (GFLOP/s = 4·B·H·Lq·Lk·D/s, causal half)",
     [](CLI::App& sub) {
       sub.add_option("--impl", g.q.impl, "Implementation name")->required();
       sub.add_option("--shape", g.q.shape, "B,H,Lq,Lk,D")->required();
       sub.add_option("--dtype", g.q.dtype, "fp64, fp32, fp16 or bf16 (default fp32)");
       sub.add_option("--threads", g.q.threads, "Threads (default: ATTNCHECK_THREADS or all cores)");
       sub.add_option("--reps", g.q.reps, "Timed repetitions; the median is reported (default 5)");
       sub.add_option(
           "--warmup", g.q.warmup,
           "Untimed warm-up runs (default 1); the first untimed run (always made) also measures peak memory");
       sub.add_flag("--causal", g.q.causal, "Top-left causal mask (FLOPs counted half)");
       sub.add_option("--kv-cache", g.q.kv_cache,
                      "Quantized KV cache <int8|fp8_e4m3|fp8_e5m2>:<tensor|head|token|blockG> (e.g. int8:block32, "
                      "fp16 block scales; the same values as the plain cache's, quantised)");
       sub.add_option("--mla", g.q.mla_dv,
                      "Absorbed MLA: one latent KV head of D columns (keys), its first DV columns the values "
                      "(DeepSeek-V3: --shape 1,128,1,32768,576 --mla 512)");
       sub.add_option("--num-splits", g.q.num_splits,
                      "Split-KV: run under a schedule forcing this many key parts (the num_splits knob, "
                      "docs/invariance.md#schedule; 0 = the implementation's choice; refused by one that does not "
                      "declare the knob)");
       sub.add_option("--pass", g.q.pass, "forward or backward (dq, dk, dv after one forward; FLOPs 2.5x forward)")
           ->capture_default_str();
       sub.add_flag("--json", g.q.json,
                    "One JSON object: impl, shape, dtype, causal, mla_dv, num_splits, threads, reps, seconds, gflops, "
                    "sgemm_gflops, "
                    "sgemm_n, ratio_to_sgemm, fma_peak_gflops, fraction_of_peak, peak_extra_rss_bytes, "
                    "peak_extra_rss_mib, cpu_seconds, "
                    "cpu_ratio_to_sgemm, isa (the SIMD target used; ATTNCHECK_ISA forces one), pass, forward_seconds, "
                    "bytes (least the pass moves), gbytes_per_s, stream_gbytes_per_s (same-run read bandwidth), "
                    "fraction_of_bandwidth, bound (memory or compute: which of the two limits this shape)");
       sub.add_option("--doc-len", g.q.doc_len, "Document mask: documents of N tokens each (FLOPs counted as without)");
       sub.add_option(
              "--block-mask", g.q.block_mask,
              "Q_BLOCK,KV_BLOCK: hand the implementation the exact block mask at these sizes and time it "
              "against runs without (docs/block-mask.md; cpu-flash uses its tiles: 48,256 for D <= 64, 96,128 above)")
           ->delimiter(',');
       add_plugin_option(sub, g.plugins);
       return std::function<int()>(run_bench);
     }}};

}  // namespace
}  // namespace attncheck::cli
