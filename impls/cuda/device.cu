// The `cuda` backend: the same kernel headers compiled by nvcc (sm_80, sm_90), run on a real device. Every CUDA
// API call is checked; a failure throws with file, line, the call and CUDA's error name and string.
#include <memory>
#include <stdexcept>
#include <string>

#include "attncheck/device_time.hpp"
#include "attncheck/device_timer.hpp"
#include "host_plan_backward.hpp"

namespace attncheck::cuda {
namespace {

void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call +
                           " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}
#define ATTNCHECK_CUDA_CHECK(call) ::attncheck::cuda::check((call), #call, __FILE__, __LINE__)

// One device allocation, freed on scope exit (errors while freeing cannot be thrown from a destructor; they
// surface at the next checked call).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) {
    if (bytes) ATTNCHECK_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  template <class T>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

DeviceBuffer upload(const void* src, size_t bytes) {
  DeviceBuffer d(bytes);
  if (bytes) ATTNCHECK_CUDA_CHECK(cudaMemcpy(d.get<void>(), src, bytes, cudaMemcpyHostToDevice));
  return d;
}
void download(void* dst, const DeviceBuffer& d, size_t bytes) {
  if (bytes) ATTNCHECK_CUDA_CHECK(cudaMemcpy(dst, d.get<void>(), bytes, cudaMemcpyDeviceToHost));
}

Support device_available() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return Support::no(std::string("no CUDA device: cudaGetDeviceCount -> ") + cudaGetErrorName(e) + ": " +
                       cudaGetErrorString(e));
  if (n == 0) return Support::no("no CUDA device: cudaGetDeviceCount -> 0 devices");
  cudaDeviceProp prop;
  const cudaError_t e2 = cudaGetDeviceProperties(&prop, 0);
  if (e2 != cudaSuccess)
    return Support::no(std::string("cudaGetDeviceProperties -> ") + cudaGetErrorName(e2) + ": " +
                       cudaGetErrorString(e2));
  if (prop.major < 8)
    return Support::no("device 0 (" + std::string(prop.name) + ") is sm_" + std::to_string(prop.major) +
                       std::to_string(prop.minor) + "; the kernels are built for sm_80 and sm_90");
  return Support::yes();
}

void run_on_device(const Problem& p, const Inputs& in, Outputs& out, KernelVersion v) {
  HostPlan plan = make_plan(p, in, out, v);
  AttnParams a = plan.params;  // host pointers, replaced one by one with device copies
  DeviceBuffer q = upload(in.q.bytes.data(), in.q.bytes.size());
  DeviceBuffer k = upload(in.k.bytes.data(), in.k.bytes.size());
  const bool v_is_k = a.v == a.k;  // absorbed MLA: v is a view of the latent cache k
  DeviceBuffer vv = v_is_k ? DeviceBuffer() : upload(in.v.bytes.data(), in.v.bytes.size());
  DeviceBuffer o = upload(out.out.bytes.data(), out.out.bytes.size());  // keeps the harness's NaN poison
  DeviceBuffer lse = out.lse ? upload(out.lse->bytes.data(), out.lse->bytes.size()) : DeviceBuffer();
  DeviceBuffer w = out.weights ? upload(out.weights->bytes.data(), out.weights->bytes.size()) : DeviceBuffer();
  DeviceBuffer scratch = upload(plan.scratch.data(), plan.scratch.size());
  DeviceBuffer diag = upload(plan.diag_offset.data(), plan.diag_offset.size() * sizeof(int64_t));
  DeviceBuffer kl = upload(plan.key_length.data(), plan.key_length.size() * sizeof(int64_t));
  DeviceBuffer mask = upload(a.mask, plan.mask_bytes);
  DeviceBuffer bias = upload(plan.bias_data(), plan.bias_bytes());
  DeviceBuffer keep = upload(a.keep, plan.keep_bytes);
  DeviceBuffer max_logit = upload(a.max_logit, plan.max_logit_bytes);
  auto upload_mod = [](const auto& values) { return upload(values.data(), values.size() * sizeof(values[0])); };
  DeviceBuffer alibi = upload_mod(plan.alibi_slopes), t5 = upload_mod(plan.t5_table), docs = upload_mod(plan.doc_ids);
  DeviceBuffer prefix = upload_mod(plan.prefix_lengths), topk = upload_mod(plan.topk_indices);
  DeviceBuffer sinks = upload_mod(plan.sinks), key_bias = upload_mod(plan.key_bias);
  DeviceBuffer q_norm = upload_mod(plan.q_norm_weight), k_norm = upload_mod(plan.k_norm_weight);
  DeviceBuffer inv_freq = upload_mod(plan.rope_inv_freq), q_pos = upload_mod(plan.rope_q_pos);
  DeviceBuffer k_pos = upload_mod(plan.rope_k_pos), sections = upload_mod(plan.rope_pair_section);
  DeviceBuffer codes = upload_mod(plan.kv_code_values), k_scale = upload_mod(plan.k_scale);
  DeviceBuffer v_scale = upload_mod(plan.v_scale);
  a.q = q.get<void>();
  a.k = k.get<void>();
  a.v = v_is_k ? a.k : vv.get<void>();
  a.kv_code_values = a.kv_code_values ? codes.get<double>() : nullptr;
  a.k_scale = a.k_scale ? k_scale.get<double>() : nullptr;
  a.v_scale = a.v_scale ? v_scale.get<double>() : nullptr;
  a.out = o.get<void>();
  a.lse = out.lse ? lse.get<void>() : nullptr;
  a.max_logit = a.max_logit ? max_logit.get<void>() : nullptr;
  a.alibi_slopes = a.alibi_slopes ? alibi.get<double>() : nullptr;
  a.t5_table = a.t5_table ? t5.get<double>() : nullptr;
  a.key_bias = a.key_bias ? key_bias.get<double>() : nullptr;
  a.doc_ids = a.doc_ids ? docs.get<int64_t>() : nullptr;
  a.prefix_lengths = a.prefix_lengths ? prefix.get<int64_t>() : nullptr;
  a.topk_indices = a.topk_indices ? topk.get<int64_t>() : nullptr;
  a.sinks = a.sinks ? sinks.get<double>() : nullptr;
  a.q_norm_weight = a.q_norm_weight ? q_norm.get<double>() : nullptr;
  a.k_norm_weight = a.k_norm_weight ? k_norm.get<double>() : nullptr;
  a.rope_inv_freq = a.rope_inv_freq ? inv_freq.get<double>() : nullptr;
  a.rope_q_pos = a.rope_q_pos ? q_pos.get<int64_t>() : nullptr;
  a.rope_k_pos = a.rope_k_pos ? k_pos.get<int64_t>() : nullptr;
  a.rope_pair_section = a.rope_pair_section ? sections.get<int>() : nullptr;
  a.weights = out.weights ? w.get<void>() : nullptr;
  a.scratch = plan.scratch.empty() ? nullptr : scratch.get<void>();
  a.diag_offset = diag.get<int64_t>();
  a.key_length = kl.get<int64_t>();
  a.mask = a.mask ? mask.get<unsigned char>() : nullptr;
  a.bias = a.bias ? bias.get<void>() : nullptr;
  a.keep = a.keep ? keep.get<unsigned char>() : nullptr;

  const KernelLaunch launch = plan_launch(a, plan.elem, v);
  DeviceTimer timer;
  timer.start();
  launch.fn<<<launch.grid, launch.block, launch.smem>>>(a);
  timer.stop();
  ATTNCHECK_CUDA_CHECK(cudaGetLastError());
  ATTNCHECK_CUDA_CHECK(cudaDeviceSynchronize());
  record_device_seconds(timer.seconds());
  download(out.out.bytes.data(), o, out.out.bytes.size());
  if (out.lse) download(out.lse->bytes.data(), lse, out.lse->bytes.size());
  if (out.weights) download(out.weights->bytes.data(), w, out.weights->bytes.size());
  if (a.max_logit) download(plan.params.max_logit, max_logit, plan.max_logit_bytes);
  finish_max_logit(p, plan, out);
}

// The backward kernels on the device: the same BwdParams as the emulation with every buffer copied; the gradients
// come back into the harness's (NaN-poisoned) tensors, dBias through the accumulation-type workspace.
void run_backward_on_device(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout, Gradients& g) {
  BwdPlan plan = make_backward_plan(p, in, fwd, dout, g);
  const HostPlan& hp = plan.inputs;
  BwdParams bp = plan.params;  // host pointers, replaced one by one with device copies
  AttnParams& a = bp.a;
  DeviceBuffer q = upload(in.q.bytes.data(), in.q.bytes.size());
  DeviceBuffer k = upload(in.k.bytes.data(), in.k.bytes.size());
  DeviceBuffer vv = upload(in.v.bytes.data(), in.v.bytes.size());
  DeviceBuffer o = upload(fwd.out.bytes.data(), fwd.out.bytes.size());
  DeviceBuffer lse = upload(fwd.lse->bytes.data(), fwd.lse->bytes.size());
  DeviceBuffer diag = upload(hp.diag_offset.data(), hp.diag_offset.size() * sizeof(int64_t));
  DeviceBuffer kl = upload(hp.key_length.data(), hp.key_length.size() * sizeof(int64_t));
  DeviceBuffer mask = upload(a.mask, hp.mask_bytes);
  DeviceBuffer bias = upload(hp.bias_data(), hp.bias_bytes());
  DeviceBuffer keep = upload(a.keep, hp.keep_bytes);
  DeviceBuffer d_o = upload(dout.bytes.data(), dout.bytes.size());
  DeviceBuffer dq = upload(g.dq.bytes.data(), g.dq.bytes.size());  // keeps the harness's NaN poison
  DeviceBuffer dk = upload(g.dk.bytes.data(), g.dk.bytes.size());
  DeviceBuffer dv = upload(g.dv.bytes.data(), g.dv.bytes.size());
  DeviceBuffer dstat = upload(plan.d.data(), plan.d.size());
  DeviceBuffer live = upload(plan.live.data(), plan.live.size());
  DeviceBuffer ds = upload(plan.ds.data(), plan.ds.size());  // zero-initialised
  DeviceBuffer dbias = upload(plan.dbias.data(), plan.dbias.size());
  a.q = q.get<void>();
  a.k = k.get<void>();
  a.v = vv.get<void>();
  a.out = o.get<void>();
  a.lse = lse.get<void>();
  a.weights = nullptr;
  a.scratch = nullptr;
  a.diag_offset = diag.get<int64_t>();
  a.key_length = kl.get<int64_t>();
  a.mask = a.mask ? mask.get<unsigned char>() : nullptr;
  a.bias = a.bias ? bias.get<void>() : nullptr;
  a.keep = a.keep ? keep.get<unsigned char>() : nullptr;
  bp.dout = d_o.get<void>();
  bp.dq = dq.get<void>();
  bp.dk = dk.get<void>();
  bp.dv = dv.get<void>();
  bp.d = dstat.get<void>();
  bp.live = live.get<unsigned char>();
  bp.ds = plan.ds.empty() ? nullptr : ds.get<void>();
  bp.dbias = plan.dbias.empty() ? nullptr : dbias.get<void>();

  DeviceTimer timer;
  timer.start();
  for (const BwdLaunch& l : plan_backward(bp, hp.elem)) {
    l.fn<<<l.grid, l.block, l.smem>>>(bp);
    ATTNCHECK_CUDA_CHECK(cudaGetLastError());
  }
  timer.stop();
  ATTNCHECK_CUDA_CHECK(cudaDeviceSynchronize());
  record_device_seconds(timer.seconds());
  download(g.dq.bytes.data(), dq, g.dq.bytes.size());
  download(g.dk.bytes.data(), dk, g.dk.bytes.size());
  download(g.dv.bytes.data(), dv, g.dv.bytes.size());
  download(plan.dbias.data(), dbias, plan.dbias.size());
  store_dbias(plan, g);
}

class DeviceImpl final : public KernelImpl {
 public:
  std::string name() const override { return "cuda"; }
  std::string description() const override {
    return "CUDA kernels (straightforward + fused flash) on device 0, built for sm_80 and sm_90";
  }
  Support available() const override { return device_available(); }
  Capabilities capabilities() const override { return kernel_capabilities(); }
  Support supports(const Problem& p) const override { return kernel_supports(p); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    run_on_device(p, in, out, default_version(p));
  }
  Support supports_backward(const Problem& p) const override { return backward_supports(p); }
  void run_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout,
                    Gradients& g) const override {
    run_backward_on_device(p, in, fwd, dout, g);
  }
};

}  // namespace

std::vector<ImplPtr> make_device_impls() { return {std::make_shared<DeviceImpl>()}; }

}  // namespace attncheck::cuda
