// RAII backend descriptors and cuDNN error reporting (see backend_desc.hpp).
#include "backend_desc.hpp"

#include <utility>

namespace attncheck::cudnn {

std::string status_text(cudnnStatus_t s) {
  return std::string(cudnnGetErrorString(s)) + " (" + std::to_string(static_cast<int>(s)) + ")";
}

void check(cudnnStatus_t s, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  // cuDNN keeps a per-thread explanation of the last failure; it usually names the offending attribute.
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  std::string msg = what + ": " + status_text(s);
  if (last[0]) msg += ": " + std::string(last);
  throw CudnnError(s, msg);
}

Desc::Desc(cudnnBackendDescriptorType_t type, std::string name) : name_(std::move(name)) {
  check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor(" + name_ + ")");
}

Desc::~Desc() { reset(); }

Desc::Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)), name_(std::move(o.name_)) {}

Desc& Desc::operator=(Desc&& o) noexcept {
  if (this != &o) {
    reset();
    d_ = std::exchange(o.d_, nullptr);
    name_ = std::move(o.name_);
  }
  return *this;
}

void Desc::reset() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
  d_ = nullptr;
}

Desc& Desc::set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v) {
  check(cudnnBackendSetAttribute(d_, a, t, n, v),
        "cudnnBackendSetAttribute(" + name_ + ", attribute " + std::to_string(static_cast<int>(a)) + ")");
  return *this;
}

Desc& Desc::finalize() {
  check(cudnnBackendFinalize(d_), "cudnnBackendFinalize(" + name_ + ")");
  return *this;
}

}  // namespace attncheck::cudnn
