// The `cudnn` implementation: SDPA forward and backward through cuDNN 9's graph API on the current CUDA device.
// run() / run_backward() build the graph of the pass, let cuDNN's heuristics pick an engine for the handle's GPU,
// copy the inputs to the device, execute the plan and copy the outputs (out and lse, or the gradients) back.
// available() says why it cannot run (no device).
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/backward.hpp"
#include "attncheck/declarations.hpp"
#include "attncheck/device_time.hpp"
#include "attncheck/device_timer.hpp"
#include "attncheck/impl.hpp"
#include "cudnn_support.hpp"
#include "sdpa_graph.hpp"
#include "variant_pack.hpp"

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

// Runs a finalised graph on the current device: the first engine configuration (heuristics mode A, then
// fallback) that builds a plan, device copies of every binding (work tensors only allocated), execution, and each
// output's bytes handed to `store`.
void execute(const Problem& p, const cudnn::SdpaGraph& graph, const std::vector<cudnn::HostBinding>& bindings,
             const std::function<void(int64_t, const std::vector<uint8_t>&)>& store) {
  Handle handle;
  Desc props = cudnn::handle_device_properties(handle.h);
  std::vector<Desc> configs = cudnn::heuristic_engine_configs(graph, props, CUDNN_HEUR_MODE_A);
  if (configs.empty()) configs = cudnn::heuristic_engine_configs(graph, props, CUDNN_HEUR_MODE_FALLBACK);
  if (configs.empty()) throw std::runtime_error("cudnn: heuristics found no engine for " + p.name());
  Desc plan;
  std::string failures;
  std::string engine;  // which configuration ran, for bench's note
  for (size_t i = 0; i < configs.size(); ++i) {
    const Desc& cfg = configs[i];
    try {
      plan = cudnn::make_plan(cfg, handle.h, props);
      engine = "cuDNN engine " + std::to_string(cudnn::engine_global_index(cfg)) + " (configuration " +
               std::to_string(i + 1) + " of " + std::to_string(configs.size()) + " proposed)";
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

  // Device memory for every tensor of the graph, filled from the host bindings; scalars come from host memory.
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  for (const cudnn::HostBinding& b : bindings) {
    buffers.push_back(std::make_unique<DeviceBuffer>(static_cast<size_t>(b.bytes), b.name));
    if (!b.is_output && !b.is_work)
      cuda_check(cudaMemcpy(buffers.back()->ptr, b.upload.data(), b.upload.size(), cudaMemcpyHostToDevice),
                 "copy " + b.name + " to the device");
    uids.push_back(b.uid);
    ptrs.push_back(buffers.back()->ptr);
  }
  for (const auto& s : graph.scalars()) {
    uids.push_back(s.uid);
    ptrs.push_back(const_cast<unsigned char*>(s.bytes));
  }
  DeviceBuffer workspace(static_cast<size_t>(workspace_bytes), "workspace");

  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace.ptr)
      .finalize();
  DeviceTimer timer;  // the handle runs on the default stream
  timer.start();
  check(cudnnBackendExecute(handle.h, plan.get(), pack.get()), "cudnnBackendExecute(" + p.name() + ")");
  timer.stop();
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudnnBackendExecute");
  record_device_seconds(timer.seconds(), engine);

  for (size_t i = 0; i < bindings.size(); ++i) {
    if (!bindings[i].is_output) continue;
    std::vector<uint8_t> host(static_cast<size_t>(bindings[i].bytes));
    cuda_check(cudaMemcpy(host.data(), buffers[i]->ptr, host.size(), cudaMemcpyDeviceToHost),
               "copy " + bindings[i].name + " from the device");
    store(bindings[i].uid, host);
  }
}

class CudnnImpl final : public Impl {
 public:
  std::string name() const override { return "cudnn"; }
  std::string description() const override {
    return "cuDNN " + std::to_string(cudnnGetVersion()) +
           " SDPA forward and backward through the graph API (composite graphs)";
  }
  Capabilities capabilities() const override { return cudnn::cudnn_capabilities(); }
  // The composite graph multiplies masked keys' values by a zero weight, so a NaN or inf stored there reaches the
  // output (measured on an H200, docs/gpu.md): its contract needs finite K and V everywhere.
  Declarations declarations() const override {
    Declarations d = Impl::declarations();
    d.masked_inputs = MaskedInputs::finite_required;
    return d;
  }
  Support supports(const Problem& p) const override {
    const Support s = cudnn::cudnn_supports(p);
    return s.ok ? cudnn::measured_wrong(p, false) : s;
  }

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
    const cudnn::SdpaGraph graph(p);
    execute(p, graph, cudnn::host_bindings(p, in, graph),
            [&](int64_t uid, const std::vector<uint8_t>& bytes) { cudnn::store_output(p, graph, uid, bytes, out); });
  }

  Support supports_backward(const Problem& p) const override {
    const Support s = cudnn::cudnn_supports_backward(p);
    return s.ok ? cudnn::measured_wrong(p, true) : s;
  }
  void run_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout,
                    Gradients& g) const override {
    const cudnn::SdpaGraph graph(p, cudnn::Pass::backward);
    const cudnn::BackwardData bwd{fwd, dout};
    execute(p, graph, cudnn::host_bindings(p, in, graph, &bwd),
            [&](int64_t uid, const std::vector<uint8_t>& bytes) { cudnn::store_gradient(p, graph, uid, bytes, g); });
  }
};

}  // namespace

std::vector<ImplPtr> make_cudnn_impls() { return {std::make_shared<CudnnImpl>()}; }

}  // namespace attncheck
