// `attncheck bench`: times one implementation's forward pass (warm-up, repetitions, median) and, in the same run,
// an Eigen SGEMM of the same FLOP count and thread count; --json prints one object (harness/bench/).
#include <cstdio>

#include "attncheck/impl.hpp"
#include "attncheck/threads.hpp"
#include "bench_support.hpp"
#include "command.hpp"
#include "plugins.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  std::string impl, shape, dtype = "fp32", pass = "forward", kv_cache;
  int threads = 0, reps = 5, warmup = 1, num_splits = 0;
  int64_t mla_dv = 0, doc_len = 0;
  std::vector<int64_t> block_mask;
  bool causal = false, json = false;
  std::vector<std::string> plugins;
} g;

int run_bench() {
  load_plugins(g.plugins);
  bench::Config c;
  c.shape = bench::parse_shape(g.shape);
  c.dtype = dtype_from_string(g.dtype);
  if (c.dtype == DType::u8) throw std::invalid_argument("--dtype: must be fp64, fp32, fp16 or bf16, got u8");
  c.causal = g.causal;
  c.kv_cache = g.kv_cache;
  if (g.mla_dv < 0)
    throw std::invalid_argument("--mla: must be >= 1 (V's columns of the latent), got " + std::to_string(g.mla_dv));
  c.mla_dv = g.mla_dv;
  c.num_splits = g.num_splits;  // checked against the implementation's declared schedule knobs
  c.doc_len = g.doc_len;
  if (!g.block_mask.empty()) {
    if (g.block_mask.size() != 2 || g.block_mask[0] < 1 || g.block_mask[1] < 1)
      throw std::invalid_argument("--block-mask: expected Q_BLOCK,KV_BLOCK (both >= 1)");
    c.block_mask = {g.block_mask[0], g.block_mask[1]};
  }
  if (g.pass != "forward" && g.pass != "backward")
    throw std::invalid_argument("--pass: must be forward or backward, got '" + g.pass + "'");
  c.backward = g.pass == "backward";
  if (g.threads < 0 || g.threads > max_threads())
    throw std::invalid_argument("--threads: must be in 1.." + std::to_string(max_threads()) + " (0 = default), got " +
                                std::to_string(g.threads));
  c.threads = g.threads > 0 ? g.threads : default_threads();
  if (g.reps < 1) throw std::invalid_argument("--reps: must be >= 1, got " + std::to_string(g.reps));
  if (g.warmup < 0) throw std::invalid_argument("--warmup: must be >= 0, got " + std::to_string(g.warmup));
  c.reps = g.reps;
  c.warmup = g.warmup;
  const ImplPtr impl = find_impl(g.impl);
  if (!impl) {
    std::string names;
    for (const auto& i : registry()) names += (names.empty() ? "" : ", ") + i->name();
    throw std::invalid_argument("--impl: unknown implementation '" + g.impl + "' (available: " + names + ")");
  }
  const bench::Result r = bench::run(*impl, c);
  if (g.json) {
    std::printf("%s\n", bench::to_json(impl->name(), c, r).c_str());
    return 0;
  }
  const auto& s = c.shape;
  const std::string splits = c.num_splits > 0 ? " num_splits=" + std::to_string(c.num_splits) : "";
  const std::string mla = c.mla_dv > 0 ? " mla Dv=" + std::to_string(c.mla_dv) : "";
  std::printf("%s %s%s%s B=%lld H=%lld Lq=%lld Lk=%lld D=%lld%s%s%s threads=%d (isa %s)\n", impl->name().c_str(),
              to_string(c.dtype), c.kv_cache.empty() ? "" : " kv-cache ", c.kv_cache.c_str(),
              static_cast<long long>(s.B), static_cast<long long>(s.H), static_cast<long long>(s.Lq),
              static_cast<long long>(s.Lk), static_cast<long long>(s.D), mla.c_str(), c.causal ? " causal" : "",
              splits.c_str(), c.threads, bench::isa().c_str());
  std::printf("  median %.4f s over %d reps: %.1f GFLOP/s; same-run SGEMM (n=%lld) %.1f GFLOP/s; ratio %.3f\n",
              r.seconds, c.reps, r.gflops, static_cast<long long>(r.sgemm_n), r.sgemm_gflops, r.ratio_to_sgemm);
  if (c.backward)
    std::printf("  backward (FLOPs 2.5x forward); same-run forward median %.4f s: backward/forward time %.3f\n",
                r.forward_seconds, r.seconds / r.forward_seconds);
  if (r.device_seconds >= 0)
    std::printf(
        "  device kernels (CUDA events) median %.6f s: %.1f GFLOP/s; the wall clock above adds transfers and "
        "setup%s%s\n",
        r.device_seconds, r.device_gflops, r.device_note.empty() ? "" : "; ", r.device_note.c_str());
  if (c.doc_len > 0)
    std::printf("  document mask: documents of %lld tokens (FLOPs above counted as without the mask)\n",
                static_cast<long long>(c.doc_len));
  if (r.block_mask_seconds >= 0)
    std::printf(
        "  block mask %lldx%lld handed to it: median %.4f s with, %.4f s without (alternating, same run): "
        "without/with %.3f\n",
        static_cast<long long>(c.block_mask[0]), static_cast<long long>(c.block_mask[1]), r.block_mask_seconds,
        r.no_block_mask_seconds, r.no_block_mask_seconds / r.block_mask_seconds);
  std::printf("  measured FMA peak %.1f GFLOP/s: %.3f of peak\n", r.fma_peak_gflops, r.fraction_of_peak);
  std::printf("  moves at least %.1f MB: %.1f GB/s; same-run read bandwidth %.1f GB/s: %.3f of it; %s-bound\n",
              r.bytes / 1e6, r.gbytes_per_s, r.stream_gbytes_per_s, r.fraction_of_bandwidth, r.bound.c_str());
  std::printf("  process CPU time %.4f s per run; ratio of CPU-time rates to the SGEMM %.3f\n", r.cpu_seconds,
              r.cpu_ratio_to_sgemm);
  if (r.extra_rss_bytes >= 0)
    std::printf("  peak extra RSS %.1f MiB\n", r.extra_rss_bytes / (1024.0 * 1024.0));
  else
    std::printf("  peak extra RSS: not measurable here (/proc/self/clear_refs not writable)\n");
  return 0;
}

const Register reg{
    {"bench", "Time an implementation against a same-run SGEMM of equal FLOPs (GFLOP/s = 4·B·H·Lq·Lk·D/s, causal half)",
     [](CLI::App& sub) {
       sub.add_option("--impl", g.impl, "Implementation name")->required();
       sub.add_option("--shape", g.shape, "B,H,Lq,Lk,D")->required();
       sub.add_option("--dtype", g.dtype, "fp64, fp32, fp16 or bf16 (default fp32)");
       sub.add_option("--threads", g.threads, "Threads (default: ATTNCHECK_THREADS or all cores)");
       sub.add_option("--reps", g.reps, "Timed repetitions; the median is reported (default 5)");
       sub.add_option(
           "--warmup", g.warmup,
           "Untimed warm-up runs (default 1); the first untimed run (always made) also measures peak memory");
       sub.add_flag("--causal", g.causal, "Top-left causal mask (FLOPs counted half)");
       sub.add_option("--kv-cache", g.kv_cache,
                      "Quantized KV cache <int8|fp8_e4m3|fp8_e5m2>:<tensor|head|token|blockG> (e.g. int8:block32, "
                      "fp16 block scales; the same values as the plain cache's, quantised)");
       sub.add_option("--mla", g.mla_dv,
                      "Absorbed MLA: one latent KV head of D columns (keys), its first DV columns the values "
                      "(DeepSeek-V3: --shape 1,128,1,32768,576 --mla 512)");
       sub.add_option("--num-splits", g.num_splits,
                      "Split-KV: run under a schedule forcing this many key parts (the num_splits knob, "
                      "docs/invariance.md#schedule; 0 = the implementation's choice; refused by one that does not "
                      "declare the knob)");
       sub.add_option("--pass", g.pass, "forward or backward (dq, dk, dv after one forward; FLOPs 2.5x forward)")
           ->capture_default_str();
       sub.add_flag("--json", g.json,
                    "One JSON object: impl, shape, dtype, causal, mla_dv, num_splits, threads, reps, seconds, gflops, "
                    "sgemm_gflops, "
                    "sgemm_n, ratio_to_sgemm, fma_peak_gflops, fraction_of_peak, peak_extra_rss_bytes, "
                    "peak_extra_rss_mib, cpu_seconds, "
                    "cpu_ratio_to_sgemm, isa (the SIMD target used; ATTNCHECK_ISA forces one), pass, forward_seconds, "
                    "bytes (least the pass moves), gbytes_per_s, stream_gbytes_per_s (same-run read bandwidth), "
                    "fraction_of_bandwidth, bound (memory or compute: which of the two limits this shape)");
       sub.add_option("--doc-len", g.doc_len, "Document mask: documents of N tokens each (FLOPs counted as without)");
       sub.add_option(
              "--block-mask", g.block_mask,
              "Q_BLOCK,KV_BLOCK: hand the implementation the exact block mask at these sizes and time it "
              "against runs without (docs/block-mask.md; cpu-flash uses its tiles: 48,256 for D <= 64, 96,128 above)")
           ->delimiter(',');
       add_plugin_option(sub, g.plugins);
       return std::function<int()>(run_bench);
     }}};

}  // namespace
}  // namespace attncheck::cli
