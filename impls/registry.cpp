// The one registry of built-in implementations. Each backend folder contributes a factory that is compiled in
// only when the backend is built (ATTNCHECK_HAVE_* from its CMakeLists); the order here is the listing order.
#include <mutex>

#include "attncheck/impl.hpp"

namespace attncheck {

std::vector<ImplPtr> make_reference_impls();  // impls/reference_impl.cpp
#ifdef ATTNCHECK_HAVE_CPU
std::vector<ImplPtr> make_cpu_impls();  // impls/cpu/
#endif
#ifdef ATTNCHECK_HAVE_CUDA
std::vector<ImplPtr> make_cuda_impls();  // impls/cuda/
#endif
#ifdef ATTNCHECK_HAVE_CUDNN
std::vector<ImplPtr> make_cudnn_impls();  // impls/cudnn/
#endif

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<ImplPtr>& mutable_registry() {
  static std::vector<ImplPtr> r = [] {
    std::vector<ImplPtr> all;
    auto add = [&](std::vector<ImplPtr> v) { all.insert(all.end(), v.begin(), v.end()); };
    add(make_reference_impls());
#ifdef ATTNCHECK_HAVE_CPU
    add(make_cpu_impls());
#endif
#ifdef ATTNCHECK_HAVE_CUDA
    add(make_cuda_impls());
#endif
#ifdef ATTNCHECK_HAVE_CUDNN
    add(make_cudnn_impls());
#endif
    return all;
  }();
  return r;
}
}  // namespace

const std::vector<ImplPtr>& registry() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return mutable_registry();
}

void register_impl(ImplPtr impl) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& i : mutable_registry())
    if (i->name() == impl->name()) throw std::invalid_argument("register_impl: name '" + impl->name() + "' is taken");
  mutable_registry().push_back(std::move(impl));
}

ImplPtr find_impl(const std::string& name) {
  for (const auto& i : registry())
    if (i->name() == name) return i;
  return nullptr;
}

}  // namespace attncheck
