// The `cudnn` implementation: SDPA forward through cuDNN 9's graph API on the current CUDA device.
// run() builds the graph, lets cuDNN's heuristics pick an engine for the handle's GPU, copies the inputs to the
// device, executes the plan and copies out and lse back. available() says why it cannot run (no device).
#include <cuda_runtime_api.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "cudnn_support.hpp"
#include "sdpa_graph.hpp"

namespace attncheck {
namespace {

using cudnn::check;
using cudnn::Desc;

void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    throw std::runtime_error(what + ": " + cudaGetErrorName(e) + " (" + std::to_string(static_cast<int>(e)) +
                             "): " + cudaGetErrorString(e));
}

// Device memory that frees itself.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes, const std::string& what) {
    if (bytes) cuda_check(cudaMalloc(&ptr, bytes), "cudaMalloc(" + what + ", " + std::to_string(bytes) + " bytes)");
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Handle {
  cudnnHandle_t h = nullptr;
  Handle() { check(cudnnCreate(&h), "cudnnCreate"); }
  ~Handle() {
    if (h) cudnnDestroy(h);
  }
};

// The tensor with the given strides (dense, logical order kept); a copy only when the strides differ.
Tensor with_strides(const Tensor& t, const std::vector<int64_t>& strides) {
  if (t.strides == strides) return t;
  Tensor c = t;
  c.strides = strides;
  std::vector<int64_t> idx(t.shape.size(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    c.set(idx.data(), t.get(idx.data()));
    for (int64_t d = t.rank() - 1; d >= 0 && ++idx[d] == t.shape[d]; --d) idx[d] = 0;
  }
  return c;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

class CudnnImpl final : public Impl {
 public:
  std::string name() const override { return "cudnn"; }
  std::string description() const override {
    return "cuDNN " + std::to_string(cudnnGetVersion()) + " SDPA forward through the graph API (composite graph)";
  }
  Capabilities capabilities() const override { return cudnn::cudnn_capabilities(); }
  Support supports(const Problem& p) const override { return cudnn::cudnn_supports(p); }

  Support available() const override {
    if (cudnnGetVersion() < 90800)
      return Support::no("cuDNN " + std::to_string(cudnnGetVersion()) + " < 9.8 (device-properties descriptor)");
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
      return Support::no(std::string("no CUDA device: cudaGetDeviceCount -> ") + cudaGetErrorName(e) + " (" +
                         std::to_string(static_cast<int>(e)) + "): " + cudaGetErrorString(e));
    if (n == 0) return Support::no("no CUDA device: cudaGetDeviceCount -> 0 devices");
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      return Support::no("cannot query the current CUDA device");
    if (major < 8) return Support::no("cuDNN SDPA needs sm_80 or newer, device is sm_" + std::to_string(major) + "x");
    return Support::yes();
  }

  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    Handle handle;
    cudnn::SdpaGraph graph(p);
    const cudnn::SdpaUids& uid = graph.uids();
    const cudnn::SdpaStrides st = cudnn::SdpaStrides::from_layout(p);

    // The first engine configuration, best first, that cuDNN can turn into a plan for this GPU.
    Desc props = cudnn::handle_device_properties(handle.h);
    std::vector<Desc> configs = cudnn::heuristic_engine_configs(graph, props, CUDNN_HEUR_MODE_A);
    if (configs.empty()) configs = cudnn::heuristic_engine_configs(graph, props, CUDNN_HEUR_MODE_FALLBACK);
    if (configs.empty()) throw std::runtime_error("cudnn: heuristics found no engine for " + p.name());
    Desc plan;
    std::string failures;
    for (const Desc& cfg : configs) {
      try {
        plan = cudnn::make_plan(cfg, handle.h);
        break;
      } catch (const cudnn::CudnnError& e) {
        failures += std::string("\n  ") + e.what();
      }
    }
    if (!plan.get()) throw std::runtime_error("cudnn: no engine configuration built a plan for " + p.name() + failures);
    int64_t workspace_bytes = 0, n = 0;
    check(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                   &workspace_bytes),
          "execution plan workspace size");

    std::vector<int64_t> uids;
    std::vector<void*> ptrs;
    std::vector<std::unique_ptr<DeviceBuffer>> buffers;
    auto upload = [&](int64_t id, const void* host, size_t bytes, const std::string& what) {
      buffers.push_back(std::make_unique<DeviceBuffer>(bytes, what));
      if (host) cuda_check(cudaMemcpy(buffers.back()->ptr, host, bytes, cudaMemcpyHostToDevice), "copy " + what);
      uids.push_back(id);
      ptrs.push_back(buffers.back()->ptr);
      return buffers.back()->ptr;
    };
    const Tensor q = with_strides(in.q, st.q), k = with_strides(in.k, st.k), v = with_strides(in.v, st.v);
    upload(uid.q, q.bytes.data(), q.bytes.size(), "q");
    upload(uid.k, k.bytes.data(), k.bytes.size(), "k");
    upload(uid.v, v.bytes.data(), v.bytes.size(), "v");
    if (out.out.strides != st.o) throw std::logic_error("cudnn: output tensor is not in the problem's layout");
    void* o_dev = upload(uid.o, nullptr, out.out.bytes.size(), "out");
    void* stats_dev = nullptr;
    if (uid.stats) stats_dev = upload(uid.stats, nullptr, sizeof(float) * p.B * p.Hq * p.Lq, "lse");
    if (uid.bias) {
      const Tensor bias = with_strides(*in.bias, contiguous_strides(in.bias->shape));
      upload(uid.bias, bias.bytes.data(), bias.bytes.size(), "bias");
    }
    if (uid.seq_q) {
      std::vector<int32_t> lq(p.B, static_cast<int32_t>(p.Lq)), lk(p.B);
      for (int64_t b = 0; b < p.B; ++b) lk[b] = static_cast<int32_t>(p.key_length(b));
      upload(uid.seq_q, lq.data(), lq.size() * sizeof(int32_t), "seq_len_q");
      upload(uid.seq_kv, lk.data(), lk.size() * sizeof(int32_t), "seq_len_kv");
    }
    if (uid.keep) {  // the u8 keep-mask as 0/1 in the I/O dtype, [B, Hq, Lq, Lk] contiguous
      const Tensor& keep_u8 = *in.keep;
      Tensor keep(p.dtype, keep_u8.shape);
      std::vector<int64_t> idx(4, 0);
      for (int64_t n = 0; n < keep.numel(); ++n) {
        keep.set(idx.data(), keep_u8.get(idx.data()) != 0 ? 1.0 : 0.0);
        for (int64_t d = 3; d >= 0 && ++idx[d] == keep.shape[d]; --d) idx[d] = 0;
      }
      upload(uid.keep, keep.bytes.data(), keep.bytes.size(), "dropout keep-mask");
    }
    for (const auto& s : graph.scalars()) {  // pass-by-value scalars are read from host memory
      uids.push_back(s.uid);
      ptrs.push_back(const_cast<unsigned char*>(s.bytes));
    }
    DeviceBuffer workspace(static_cast<size_t>(workspace_bytes), "workspace");

    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data())
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data())
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace.ptr)
        .finalize();
    check(cudnnBackendExecute(handle.h, plan.get(), pack.get()), "cudnnBackendExecute(" + p.name() + ")");
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudnnBackendExecute");

    cuda_check(cudaMemcpy(out.out.bytes.data(), o_dev, out.out.bytes.size(), cudaMemcpyDeviceToHost), "copy out");
    if (stats_dev && out.lse) {  // stats are fp32 [B, Hq, Lq, 1] packed, which is lse's [B, Hq, Lq] order
      std::vector<float> lse(static_cast<size_t>(p.B * p.Hq * p.Lq));
      cuda_check(cudaMemcpy(lse.data(), stats_dev, lse.size() * sizeof(float), cudaMemcpyDeviceToHost), "copy lse");
      for (size_t i = 0; i < lse.size(); ++i) out.lse->set_offset(static_cast<int64_t>(i), lse[i]);
    }
  }
};

}  // namespace

std::vector<ImplPtr> make_cudnn_impls() { return {std::make_shared<CudnnImpl>()}; }

}  // namespace attncheck
