// Benchmark machinery (see bench_support.hpp). Peak memory: VmHWM is reset through /proc/self/clear_refs before
// a run, so the figure is the run's own high-water mark above the resident size it started from.
#include "bench_support.hpp"

#include "attncheck/backward.hpp"
#include "attncheck/block_mask.hpp"
#include "attncheck/device_time.hpp"
#include "attncheck/declarations.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/mla.hpp"
#include "attncheck/schedule.hpp"
#include "attncheck/threads.hpp"
#include "simd.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace attncheck::bench {

Shape parse_shape(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t x = 0;
    try {
      x = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty() || x < 1)
      throw std::invalid_argument("--shape: '" + s + "' must be five positive integers B,H,Lq,Lk,D; bad item '" + item +
                                  "'");
    v.push_back(x);
  }
  if (v.size() != 5)
    throw std::invalid_argument("--shape: '" + s + "' must be five positive integers B,H,Lq,Lk,D, got " +
                                std::to_string(v.size()) + " items");
  return {v[0], v[1], v[2], v[3], v[4]};
}

double attention_flops(const Config& c) {
  const Shape& s = c.shape;
  const double f = 2.0 * static_cast<double>(s.B * s.H) * static_cast<double>(s.Lq) * static_cast<double>(s.Lk) *
                   static_cast<double>(s.D + (c.mla_dv > 0 ? c.mla_dv : s.D));
  return (c.causal ? f / 2 : f) * (c.backward ? 2.5 : 1.0);
}

namespace {
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Wall-clock and process CPU seconds of fn(), each the median over reps.
template <class F>
std::pair<double, double> time_median(int reps, F&& fn) {
  std::vector<double> wall, cpu;
  for (int r = 0; r < std::max(reps, 1); ++r) {
    const double c0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    fn();
    wall.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    cpu.push_back(process_cpu_seconds() - c0);
  }
  return {median(wall), median(cpu)};
}

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"), or -1.
double proc_status_bytes(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::atof(line.c_str() + key.size()) * 1024.0;  // reported in kB
  return -1;
}
// glibc raises its mmap threshold after a large block is freed, so the next run would reuse heap memory the
// previous one left resident and its peak would not show. A fixed threshold keeps large blocks mmap'ed, so every
// run's working memory is mapped (and counted) afresh.
void fix_malloc_for_rss() {
#if defined(__GLIBC__)
  static const bool done = [] { return mallopt(M_MMAP_THRESHOLD, 64 * 1024) == 1; }();
  (void)done;
#endif
}
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  return static_cast<bool>(f);
}

// The CPU implementations (and the reference) read their thread count from ATTNCHECK_THREADS.
struct ThreadsEnv {
  std::string old;
  bool had;
  explicit ThreadsEnv(int n) {
    const char* o = std::getenv("ATTNCHECK_THREADS");
    had = o != nullptr;
    if (had) old = o;
    setenv("ATTNCHECK_THREADS", std::to_string(n).c_str(), 1);
  }
  ~ThreadsEnv() {
    if (had)
      setenv("ATTNCHECK_THREADS", old.c_str(), 1);
    else
      unsetenv("ATTNCHECK_THREADS");
  }
};
}  // namespace

std::pair<double, double> sgemm_seconds(int64_t n, int threads, int warmup, int reps) {
  // A (n x n) row-major and B packed in strips once (as the attention kernels pack K and V once per head);
  // C = A·B with the dispatched SIMD GEMM, rows split over the threads.
  const int64_t W = cpu::simd::strip_width<float>(), np = (n + W - 1) / W * W;
  std::vector<float> A(static_cast<size_t>(n * n)), B(static_cast<size_t>(n * np), 0.0f),
      C(static_cast<size_t>(n * np));
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto rnd = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-52 - 0.5);
  };
  for (float& a : A) a = rnd();
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < n; ++j) B[static_cast<size_t>(j / W * n * W + k * W + j % W)] = rnd();
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, n));
  auto part = [&](int t) {
    const int64_t r0 = n * t / threads, r1 = n * (t + 1) / threads;
    cpu::simd::gemm<float>(r1 - r0, n, n, A.data() + r0 * n, n, B.data(), n * W, W, C.data() + r0 * np, np, false);
  };
  auto once = [&] {
    if (threads == 1) return part(0);
    run_on_threads(threads, part, Shortfall::fail);  // rows split statically: every thread must run
  };
  for (int w = 0; w < warmup; ++w) once();
  const auto t = time_median(reps, once);
  if (!std::isfinite(C[0])) throw std::runtime_error("sgemm produced a non-finite value");
  return t;
}

double stream_gbytes_per_s(int threads) {
  // 512 MiB: 16 times the largest last-level caches of the machines this runs on, so the reads come from DRAM.
  constexpr int64_t kWords = int64_t{64} << 20;
  threads = std::max(threads, 1);
  std::vector<uint64_t> buf(static_cast<size_t>(kWords));
  for (int64_t i = 0; i < kWords; ++i) buf[static_cast<size_t>(i)] = static_cast<uint64_t>(i);  // pages touched
  std::vector<uint64_t> sink(static_cast<size_t>(threads));
  auto once = [&] {
    run_on_threads(
        threads,
        [&](int t) {
          const int64_t a = kWords * t / threads, e = kWords * (t + 1) / threads;
          uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;  // independent integer sums: the loop vectorises, no FP latency
          for (int64_t i = a; i + 4 <= e; i += 4) {
            s0 += buf[static_cast<size_t>(i)], s1 += buf[static_cast<size_t>(i + 1)];
            s2 += buf[static_cast<size_t>(i + 2)], s3 += buf[static_cast<size_t>(i + 3)];
          }
          sink[static_cast<size_t>(t)] = s0 + s1 + s2 + s3;
        },
        Shortfall::fail);
  };
  once();
  const double seconds = time_median(3, once).first;
  if (sink[0] == 1) throw std::runtime_error("unreachable");  // keeps the sums alive
  return static_cast<double>(kWords * 8) / seconds / 1e9;
}

double fma_peak_gflops(int threads) {
  const int64_t iters = 20'000'000;
  threads = std::max(threads, 1);
  std::vector<float> sink(static_cast<size_t>(threads));
  auto once = [&] {
    // A peak of N threads needs all N running.
    run_on_threads(
        threads, [&](int t) { sink[static_cast<size_t>(t)] = cpu::simd::fma_chains(iters); }, Shortfall::fail);
  };
  once();  // warm-up (clock ramp)
  const double flops = static_cast<double>(cpu::simd::fma_flops_per_iter()) * static_cast<double>(iters) * threads;
  const double seconds = time_median(3, once).first;
  if (!std::isfinite(sink[0])) throw std::runtime_error("fma peak produced a non-finite value");
  return flops / seconds / 1e9;
}

Result run(const Impl& impl, const Config& c) {
  Problem p;
  p.B = c.shape.B, p.Hq = p.Hkv = c.shape.H, p.Lq = c.shape.Lq, p.Lk = c.shape.Lk, p.Dqk = p.Dv = c.shape.D;
  p.dtype = c.dtype;
  p.causal = c.causal;
  p.want_lse = p.want_lse || c.backward;  // a flash backward recomputes P from the saved lse
  if (c.mla_dv > 0) p.Hkv = 1, p.Dv = c.mla_dv, p.mla = true;
  if (c.doc_len < 0) throw std::invalid_argument("--doc-len: must be >= 1 (0 = off), got " + std::to_string(c.doc_len));
  for (int64_t b = 0; c.doc_len > 0 && b < p.B; ++b)
    for (int64_t j = 0; j < p.Lk; ++j) p.doc_ids.push_back(j / c.doc_len);
  const Problem plain = p;
  if (!c.kv_cache.empty()) {
    const size_t colon = c.kv_cache.find(':');
    if (colon == std::string::npos)
      throw std::invalid_argument("--kv-cache: expected <int8|fp8_e4m3|fp8_e5m2>:<tensor|head|token|blockG>, got '" +
                                  c.kv_cache + "'");
    p.kv_dtype = dtype_from_string(c.kv_cache.substr(0, colon));
    std::string g = c.kv_cache.substr(colon + 1);
    if (g.rfind("block", 0) == 0 && g.size() > 5) p.kv_block = std::stoll(g.substr(5)), g = "block";
    p.kv_scales = kv_scales_from_string(g);
    p.kv_scale_dtype = p.kv_scales == KvScales::block ? DType::f16 : DType::f32;  // q8_0's fp16 block scales
  }
  validate(p);
  if (const Support s = impl.available(); !s.ok) throw std::invalid_argument(impl.name() + " unavailable: " + s.reason);
  if (const Support s = impl.supports(p); !s.ok)
    throw std::invalid_argument(impl.name() + " does not support " + p.name() + ": " + s.reason);
  if (const Support s = c.backward ? impl.supports_backward(p) : Support::yes(); !s.ok)
    throw std::invalid_argument(impl.name() + " has no backward for " + p.name() + ": " + s.reason);
  Inputs in{make_qkv(plain, 0), make_qkv(plain, 1), make_qkv(plain, 2), {}, {}, {}, {}, {}};
  uint64_t state = 0x2545f4914f6cdd1dull;
  for (Tensor* t : {&in.q, &in.k, &in.v})
    for (int64_t n = 0; n < t->numel(); ++n) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      t->set_offset(n, static_cast<double>(state >> 11) * 0x1.0p-52 - 1.0);  // signed, in [-1, 1)
    }
  if (p.kv_quantized()) quantize_kv(p, in);
  if (p.mla) tie_latent_values(p, in);
  Outputs out = make_outputs(p);
  // The backward's operands: dout like the inputs, the forward's outputs (with lse) computed once, the gradients.
  Tensor dout = make_dout(p);
  for (int64_t n = 0; c.backward && n < dout.numel(); ++n) dout.set_offset(n, in.q.get_offset(n % in.q.numel()));
  Gradients grads = c.backward ? make_gradients(p) : Gradients{};
  fix_malloc_for_rss();
  if (c.num_splits < 0 || (c.num_splits > 0 && !(impl.declarations().schedule_knobs & knob_num_splits)))
    throw std::invalid_argument("--num-splits " + std::to_string(c.num_splits) + ": " +
                                (c.num_splits < 0 ? std::string("must be >= 0")
                                                  : impl.name() + " does not declare the num_splits schedule knob"));
  const ScheduleScope schedule(Schedule{0, c.num_splits, false});  // read by the implementation on this thread
  std::optional<BlockMask> bm;  // built once, as FlexAttention's caller builds it with create_block_mask
  if (c.block_mask[0] != 0 || c.block_mask[1] != 0) bm = derive_block_mask(p, in, c.block_mask[0], c.block_mask[1]);
  const BlockMaskScope handed(bm ? &*bm : nullptr);  // read by the implementation on this thread
  auto once = [&] { c.backward ? impl.run_backward(p, in, out, dout, grads) : impl.run(p, in, out); };

  Result r;
  {
    const ThreadsEnv env(c.threads);
    if (c.backward) {
      impl.run(p, in, out);
      std::tie(r.forward_seconds, std::ignore) = time_median(c.reps, [&] { impl.run(p, in, out); });
    }
    // Memory on the first run: resident size before, high-water mark during (outputs are already allocated).
    const bool reset = reset_peak_rss();
    const double rss0 = proc_status_bytes("VmRSS");
    once();
    const double hwm = proc_status_bytes("VmHWM");
    if (reset && rss0 >= 0 && hwm >= 0) r.extra_rss_bytes = std::max(0.0, hwm - rss0);
    for (int w = 1; w < c.warmup; ++w) once();  // the memory run was the first warm-up
    if (bm) {  // without and with the block mask, alternating, so that a change of load hits both alike
      std::vector<double> off, on;
      for (int i = 0; i < c.reps; ++i) {
        {
          const BlockMaskScope none(nullptr);
          off.push_back(time_median(1, once).first);
        }
        on.push_back(time_median(1, once).first);
      }
      r.no_block_mask_seconds = median(off), r.block_mask_seconds = median(on);
    }
    std::vector<double> device;
    std::tie(r.seconds, r.cpu_seconds) = time_median(c.reps, [&] {
      record_device_seconds(-1.0);
      once();
      device.push_back(last_device_seconds());
    });
    if (*std::min_element(device.begin(), device.end()) >= 0) r.device_seconds = median(device);
    r.device_note = last_device_note();
  }
  const double flops = attention_flops(c);
  r.gflops = flops / r.seconds / 1e9;
  if (r.device_seconds > 0) r.device_gflops = flops / r.device_seconds / 1e9;
  r.sgemm_n = std::max<int64_t>(16, std::llround(std::cbrt(flops / 2.0)));
  const double gemm_flops = 2.0 * std::pow(static_cast<double>(r.sgemm_n), 3);
  const auto [sg_wall, sg_cpu] = sgemm_seconds(r.sgemm_n, c.threads, c.warmup, c.reps);
  r.sgemm_gflops = gemm_flops / sg_wall / 1e9;
  r.ratio_to_sgemm = r.gflops / r.sgemm_gflops;
  r.fma_peak_gflops = fma_peak_gflops(c.threads);
  r.fraction_of_peak = r.gflops / r.fma_peak_gflops;
  r.cpu_ratio_to_sgemm = (flops / r.cpu_seconds) / (gemm_flops / sg_cpu);
  const double size = static_cast<double>(dtype_size(c.dtype));
  const double q_o = static_cast<double>(in.q.numel() + out.out.numel());
  const double k_v = static_cast<double>(in.k.numel() + (p.mla ? 0 : in.v.numel()));  // MLA: V is K's memory
  const double kv_size = static_cast<double>(dtype_size(in.k.dtype));  // a quantized cache: its 1-byte codes
  const double scales =
      in.k_scale
          ? static_cast<double>((in.k_scale->numel() + in.v_scale->numel()) * int64_t(dtype_size(in.k_scale->dtype)))
          : 0.0;
  r.bytes = (size * q_o + kv_size * k_v + scales) *
            (c.backward ? 2.0 : 1.0);  // backward: dO and dQ like Q and O, dK dV like K V
  r.gbytes_per_s = r.bytes / r.seconds / 1e9;
  r.stream_gbytes_per_s = stream_gbytes_per_s(c.threads);
  r.fraction_of_bandwidth = r.gbytes_per_s / r.stream_gbytes_per_s;
  r.bound = r.bytes / (r.stream_gbytes_per_s * 1e9) > flops / (r.fma_peak_gflops * 1e9) ? "memory" : "compute";
  return r;
}

std::string isa() { return cpu::simd::target(); }

std::string to_json(const std::string& impl, const Config& c, const Result& r) {
  const Shape& s = c.shape;
  char buf[2048];
  std::snprintf(buf, sizeof buf,
                "{\"impl\": \"%s\", \"shape\": [%lld, %lld, %lld, %lld, %lld], \"dtype\": \"%s\", \"causal\": %s, "
                "\"mla_dv\": %lld, \"num_splits\": %d, "
                "\"threads\": %d, \"reps\": %d, \"seconds\": %.6g, \"gflops\": %.4g, \"sgemm_gflops\": %.4g, "
                "\"sgemm_n\": %lld, \"ratio_to_sgemm\": %.4g, \"fma_peak_gflops\": %.4g, \"fraction_of_peak\": %.4g, "
                "\"peak_extra_rss_bytes\": %.0f, "
                "\"peak_extra_rss_mib\": %.2f, \"cpu_seconds\": %.6g, \"cpu_ratio_to_sgemm\": %.4g, \"isa\": \"%s\", "
                "\"pass\": \"%s\", \"forward_seconds\": %.6g, \"bytes\": %.0f, \"gbytes_per_s\": %.4g, "
                "\"stream_gbytes_per_s\": %.4g, \"fraction_of_bandwidth\": %.4g, \"bound\": \"%s\", "
                "\"device_seconds\": %.6g, \"device_gflops\": %.6g, \"device_note\": \"%s\"}",
                impl.c_str(), static_cast<long long>(s.B), static_cast<long long>(s.H), static_cast<long long>(s.Lq),
                static_cast<long long>(s.Lk), static_cast<long long>(s.D), to_string(c.dtype),
                c.causal ? "true" : "false", static_cast<long long>(c.mla_dv), c.num_splits, c.threads, c.reps,
                r.seconds, r.gflops, r.sgemm_gflops, static_cast<long long>(r.sgemm_n), r.ratio_to_sgemm,
                r.fma_peak_gflops, r.fraction_of_peak, r.extra_rss_bytes, r.extra_rss_bytes / (1024.0 * 1024.0),
                r.cpu_seconds, r.cpu_ratio_to_sgemm, isa().c_str(), c.backward ? "backward" : "forward",
                c.backward ? r.forward_seconds : r.seconds, r.bytes, r.gbytes_per_s, r.stream_gbytes_per_s,
                r.fraction_of_bandwidth, r.bound.c_str(), r.device_seconds, r.device_gflops, r.device_note.c_str());
  return buf;
}

}  // namespace attncheck::bench
