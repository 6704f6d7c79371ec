// The worker side of the protocol (docs/worker-protocol.md) for implementations attncheck can load itself: a C
// plugin library or a registered Impl. `attncheck worker-host --plugin LIB.so | --impl NAME` calls serve().
#pragma once

#include <memory>
#include <string>

#include "attncheck/impl.hpp"
#include "attncheck/module_impl.hpp"
#include "worker_json.hpp"

namespace attncheck::worker {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual json hello() = 0;  // name, description, capabilities, supports, available (no type/protocol)
  virtual Support supports(const Problem& p) = 0;
  // Run on the tensors of a request, which live in the mapped shared file [base, base + size). Returns "" or the
  // implementation's error message; throws ProtocolError for a malformed request.
  virtual std::string run(const Problem& p, const json& tensors, unsigned char* base, size_t size) = 0;
  // Protocol 2: the backward pass. Tensors: the inputs, out and lse of the forward, dout, and dq, dk, dv (dbias).
  virtual Support supports_backward(const Problem& p) = 0;
  virtual std::string run_backward(const Problem& p, const json& tensors, unsigned char* base, size_t size) = 0;
  // The merge message (2c), answered when the hello declared "merge": o, lse | max and sum in; out, out_lse |
  // out_max and out_sum out.
  virtual Support supports_merge(const MergeProblem& p) = 0;
  virtual std::string run_merge(const MergeProblem& p, const json& tensors, unsigned char* base, size_t size) = 0;
  // The module message (2d), answered when the hello declared "module": x (x2), the weights and biases, the
  // attention's mask, bias and keep in; y (weights) out.
  virtual Support supports_module(const ModuleProblem& m) = 0;
  virtual std::string run_module(const ModuleProblem& m, const json& tensors, unsigned char* base, size_t size) = 0;
  // Its backward (module_backward, 2d), answered when the hello declared "module_backward": the module's inputs and
  // dy in; the gradients named by module_grad_names (dx, dwq, ..., dwo, dbo, dbias) out.
  virtual Support supports_module_backward(const ModuleProblem& m) = 0;
  virtual std::string run_module_backward(const ModuleProblem& m, const json& tensors, unsigned char* base,
                                          size_t size) = 0;
};

std::unique_ptr<Backend> plugin_backend(const std::string& path);  // throws PluginError
// `module`: the built-in's module entry (find_module_entry), or none; passed in, so this library needs no registry.
std::unique_ptr<Backend> impl_backend(ImplPtr impl, ModuleImplPtr module = nullptr);

// Reads requests on stdin and answers on stdout until `bye` or end of input; returns the exit status (0).
int serve(Backend& backend);

}  // namespace attncheck::worker
