// Choosing an engine for an SDPA graph: device-properties descriptors (named GPUs from JSON, or the handle's GPU),
// cuDNN's heuristics, and execution plans. With a named GPU this runs without any device: cuDNN only needs the
// CUDA driver library to be loadable (the toolkit's stub is enough) until a plan loads its compiled kernel.
#include <string>

#include "sdpa_graph.hpp"

namespace attncheck::cudnn {

const char* to_string(NamedGpu g) { return g == NamedGpu::a100_sm80 ? "sm_80" : "sm_90"; }

namespace {

// Field names are the ones cuDNN 9.19 reads back from CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION (the same names
// it writes when serialising a real device); values are the public specifications of each GPU.
// deviceVer is major*100 + minor*10; driverVer is the CUDA driver API version (13.0 -> 13000).
std::string device_json(NamedGpu g) {
  struct Spec {
    const char* name;
    int sms, smem_optin, l2, sm_khz, mem_khz, device_ver;
    long long global_mem;
  };
  const Spec s = g == NamedGpu::a100_sm80
                     ? Spec{"NVIDIA A100-SXM4-80GB", 108, 166912, 41943040, 1410000, 1593000, 800, 85899345920LL}
                     : Spec{"NVIDIA H100 80GB HBM3", 132, 232448, 52428800, 1980000, 2619000, 900, 85045460992LL};
  auto kv = [](const char* k, long long v) { return std::string("\"") + k + "\":" + std::to_string(v) + ","; };
  std::string j = "{";
  j += "\"deviceName\":\"" + std::string(s.name) + "\",";
  j += "\"maxGridSize\":[2147483647,65535,65535],\"maxBlockSize\":[1024,1024,64],";
  j += kv("regsPerBlock", 65536) + kv("multiProcessorCount", s.sms) + kv("warpSize", 32);
  j += kv("maxSharedMemoryPerBlock", 49152) + kv("maxSharedMemoryPerBlockOptin", s.smem_optin);
  j += kv("reservedSharedMemoryPerBlock", 1024) + kv("maxRegistersPerSM", 65536) + kv("maxCtasPerSM", 32);
  j += kv("maxThreadsPerBlock", 1024) + kv("maxThreadsPerSM", 2048) + kv("pciDeviceId", 0);
  j += kv("isTccDriver", 0) + kv("supportCoopLaunch", 1) + kv("totalGlobalMem", s.global_mem);
  j += kv("smClockRateKHz", s.sm_khz) + kv("memClockRateKHz", s.mem_khz) + kv("l2CacheSize", s.l2);
  j += kv("cudaDeviceId", 0) + kv("deviceVer", s.device_ver);
  j += "\"driverVer\":13000}";
  return j;
}

}  // namespace

Desc named_device_properties(NamedGpu g) {
  const std::string json = device_json(g);
  Desc d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, std::string("device properties ") + to_string(g));
  d.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, static_cast<int64_t>(json.size()), json.data());
  d.finalize();
  return d;
}

Desc handle_device_properties(cudnnHandle_t handle) {
  Desc d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, "device properties of the handle's GPU");
  d.set(CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle).finalize();
  return d;
}

std::vector<Desc> heuristic_engine_configs(const SdpaGraph& g, const Desc& device_props, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g.op_graph())
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)
      .set_desc(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, device_props)
      .finalize();
  int64_t count = 0;
  check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr),
        "engine heuristics: result count");
  std::vector<Desc> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config " + std::to_string(i));
    raw.push_back(configs.back().get());
  }
  int64_t got = 0;
  if (count > 0)
    check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                   &got, raw.data()),
          "engine heuristics: results");
  configs.resize(static_cast<size_t>(got));
  return configs;
}

int64_t engine_global_index(const Desc& engine_config) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine of a config");
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0, index = -1;
  check(cudnnBackendGetAttribute(engine_config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                 &raw),
        "engine config: engine");
  check(cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index),
        "engine: global index");
  return index;
}

Desc make_plan(const Desc& engine_config, cudnnHandle_t handle, const Desc& device_props) {
  Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
      .set_desc(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, device_props)
      .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, engine_config)
      .finalize();
  return plan;
}

Desc make_plan(const Desc& engine_config, const Desc& device_props) {
  Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
  plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, device_props)
      .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, engine_config)
      .finalize();
  return plan;
}

}  // namespace attncheck::cudnn
