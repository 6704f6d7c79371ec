// A small RAII layer over cuDNN's backend (graph) API: one owning handle per cudnnBackendDescriptor_t, typed
// attribute setters, and errors that carry cuDNN's own status name and last-error text. Nothing here knows about
// attention; sdpa_graph.cpp builds the SDPA graph with it.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace attncheck::cudnn {

// A failed cuDNN call: `what` names the call and the descriptor, status() is cuDNN's code.
class CudnnError : public std::runtime_error {
 public:
  CudnnError(cudnnStatus_t status, const std::string& msg) : std::runtime_error(msg), status_(status) {}
  cudnnStatus_t status() const { return status_; }

 private:
  cudnnStatus_t status_;
};

// Throws CudnnError("<what>: <status name> (<code>): <cuDNN's last error string>") unless s is SUCCESS.
void check(cudnnStatus_t s, const std::string& what);

// An owned backend descriptor. Setters return *this so a descriptor reads as one statement.
class Desc {
 public:
  Desc() = default;
  Desc(cudnnBackendDescriptorType_t type, std::string name);
  ~Desc();
  Desc(Desc&& o) noexcept;
  Desc& operator=(Desc&& o) noexcept;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  const std::string& name() const { return name_; }

  Desc& set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v);
  Desc& set_i64(cudnnBackendAttributeName_t a, int64_t v) { return set(a, CUDNN_TYPE_INT64, 1, &v); }
  Desc& set_i64s(cudnnBackendAttributeName_t a, const std::vector<int64_t>& v) {
    return set(a, CUDNN_TYPE_INT64, static_cast<int64_t>(v.size()), v.data());
  }
  Desc& set_bool(cudnnBackendAttributeName_t a, bool v) { return set(a, CUDNN_TYPE_BOOLEAN, 1, &v); }
  Desc& set_double(cudnnBackendAttributeName_t a, double v) { return set(a, CUDNN_TYPE_DOUBLE, 1, &v); }
  Desc& set_dtype(cudnnBackendAttributeName_t a, cudnnDataType_t v) { return set(a, CUDNN_TYPE_DATA_TYPE, 1, &v); }
  Desc& set_desc(cudnnBackendAttributeName_t a, const Desc& v) {
    cudnnBackendDescriptor_t raw = v.get();
    return set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  Desc& finalize();

 private:
  void reset();
  cudnnBackendDescriptor_t d_ = nullptr;
  std::string name_;
};

// "CUDNN_STATUS_NOT_SUPPORTED_SHAPE" style name (cudnnGetErrorString) plus the numeric code.
std::string status_text(cudnnStatus_t s);

}  // namespace attncheck::cudnn
