// `attncheck bench`'s checks and printing (see bench_request.hpp).
#include "bench_request.hpp"

#include <stdexcept>

#include "attncheck/threads.hpp"

namespace attncheck::bench {

Config config_of(const Request& q) {
  Config c;
  c.shape = parse_shape(q.shape);
  c.dtype = dtype_from_string(q.dtype);
  if (c.dtype == DType::u8) throw std::invalid_argument("--dtype: must be fp64, fp32, fp16 or bf16, got u8");
  c.causal = q.causal;
  c.kv_cache = q.kv_cache;
  if (q.mla_dv < 0)
    throw std::invalid_argument("--mla: must be >= 1 (V's columns of the latent), got " + std::to_string(q.mla_dv));
  c.mla_dv = q.mla_dv;
  c.num_splits = q.num_splits;  // checked against the implementation's declared schedule knobs
  c.doc_len = q.doc_len;
  if (!q.block_mask.empty()) {
    if (q.block_mask.size() != 2 || q.block_mask[0] < 1 || q.block_mask[1] < 1)
      throw std::invalid_argument("--block-mask: expected Q_BLOCK,KV_BLOCK (both >= 1)");
    c.block_mask = {q.block_mask[0], q.block_mask[1]};
  }
  if (q.pass != "forward" && q.pass != "backward")
    throw std::invalid_argument("--pass: must be forward or backward, got '" + q.pass + "'");
  c.backward = q.pass == "backward";
  if (q.threads < 0 || q.threads > max_threads())
    throw std::invalid_argument("--threads: must be in 1.." + std::to_string(max_threads()) + " (0 = default), got " +
                                std::to_string(q.threads));
  c.threads = q.threads > 0 ? q.threads : default_threads();
  if (q.reps < 1) throw std::invalid_argument("--reps: must be >= 1, got " + std::to_string(q.reps));
  if (q.warmup < 0) throw std::invalid_argument("--warmup: must be >= 0, got " + std::to_string(q.warmup));
  c.reps = q.reps;
  c.warmup = q.warmup;
  return c;
}

int run_request(const Request& q, std::FILE* out) {
  const Config c = config_of(q);
  const ImplPtr impl = find_impl(q.impl);
  if (!impl) {
    std::string names;
    for (const auto& i : registry()) names += (names.empty() ? "" : ", ") + i->name();
    throw std::invalid_argument("--impl: unknown implementation '" + q.impl + "' (available: " + names + ")");
  }
  const Result r = run(*impl, c);
  if (q.json)
    std::fprintf(out, "%s\n", to_json(impl->name(), c, r).c_str());
  else
    print_text(out, impl->name(), c, r);
  return 0;
}

void print_text(std::FILE* out, const std::string& impl, const Config& c, const Result& r) {
  const Shape& s = c.shape;
  const std::string splits = c.num_splits > 0 ? " num_splits=" + std::to_string(c.num_splits) : "";
  const std::string mla = c.mla_dv > 0 ? " mla Dv=" + std::to_string(c.mla_dv) : "";
  std::fprintf(out, "%s %s%s%s B=%lld H=%lld Lq=%lld Lk=%lld D=%lld%s%s%s threads=%d (isa %s)\n", impl.c_str(),
               to_string(c.dtype), c.kv_cache.empty() ? "" : " kv-cache ", c.kv_cache.c_str(),
               static_cast<long long>(s.B), static_cast<long long>(s.H), static_cast<long long>(s.Lq),
               static_cast<long long>(s.Lk), static_cast<long long>(s.D), mla.c_str(), c.causal ? " causal" : "",
               splits.c_str(), c.threads, isa().c_str());
  std::fprintf(out, "  median %.4f s over %d reps: %.1f GFLOP/s; same-run SGEMM (n=%lld) %.1f GFLOP/s; ratio %.3f\n",
               r.seconds, c.reps, r.gflops, static_cast<long long>(r.sgemm_n), r.sgemm_gflops, r.ratio_to_sgemm);
  if (c.backward)
    std::fprintf(out, "  backward (FLOPs 2.5x forward); same-run forward median %.4f s: backward/forward time %.3f\n",
                 r.forward_seconds, r.seconds / r.forward_seconds);
  if (r.device_seconds >= 0)
    std::fprintf(out,
                 "  device kernels (CUDA events) median %.6f s: %.1f GFLOP/s; the wall clock above adds transfers and "
                 "setup%s%s\n",
                 r.device_seconds, r.device_gflops, r.device_note.empty() ? "" : "; ", r.device_note.c_str());
  if (c.doc_len > 0)
    std::fprintf(out, "  document mask: documents of %lld tokens (FLOPs above counted as without the mask)\n",
                 static_cast<long long>(c.doc_len));
  if (r.block_mask_seconds >= 0)
    std::fprintf(out,
                 "  block mask %lldx%lld handed to it: median %.4f s with, %.4f s without (alternating, same run): "
                 "without/with %.3f\n",
                 static_cast<long long>(c.block_mask[0]), static_cast<long long>(c.block_mask[1]), r.block_mask_seconds,
                 r.no_block_mask_seconds, r.no_block_mask_seconds / r.block_mask_seconds);
  std::fprintf(out, "  measured FMA peak %.1f GFLOP/s: %.3f of peak\n", r.fma_peak_gflops, r.fraction_of_peak);
  std::fprintf(out, "  moves at least %.1f MB: %.1f GB/s; same-run read bandwidth %.1f GB/s: %.3f of it; %s-bound\n",
               r.bytes / 1e6, r.gbytes_per_s, r.stream_gbytes_per_s, r.fraction_of_bandwidth, r.bound.c_str());
  std::fprintf(out, "  process CPU time %.4f s per run; ratio of CPU-time rates to the SGEMM %.3f\n", r.cpu_seconds,
               r.cpu_ratio_to_sgemm);
  if (r.extra_rss_bytes >= 0)
    std::fprintf(out, "  peak extra RSS %.1f MiB\n", r.extra_rss_bytes / (1024.0 * 1024.0));
  else
    std::fprintf(out, "  peak extra RSS: not measurable here (/proc/self/clear_refs not writable)\n");
}

}  // namespace attncheck::bench
