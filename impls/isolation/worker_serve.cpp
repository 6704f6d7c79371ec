// The worker side of the protocol for what attncheck itself can run: a C plugin (called straight on the shared
// memory, so its stray writes hit the client's guard bands) or a registered Impl (inputs copied out of and outputs
// into shared memory). Used by `attncheck worker-host`.
#include "worker_serve.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "../plugin_abi.hpp"
#include "attncheck/backward.hpp"
#include "attncheck/kv_cache.hpp"
#include "worker_json.hpp"

namespace attncheck::worker {

namespace {

// The client's shared file, mapped while its path and size stay the same.
struct Shm {
  std::string path;
  size_t size = 0;
  unsigned char* base = nullptr;
  void map(const std::string& p, size_t n) {
    if (base && p == path && n == size) return;
    if (base) munmap(base, size), base = nullptr;
    const int fd = ::open(p.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) throw ProtocolError("run: field 'shm': cannot open '" + p + "': " + std::strerror(errno));
    void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) throw ProtocolError("run: field 'shm': cannot map '" + p + "': " + std::strerror(errno));
    base = static_cast<unsigned char*>(m), path = p, size = n;
  }
};

struct View {
  unsigned char* ptr = nullptr;
  size_t nbytes = 0;
  std::vector<int64_t> shape, strides;
};

// The tensor `key` of a run request, bounds-checked against the shared file; absent -> ptr null.
View view(const json& tensors, const std::string& key, unsigned char* base, size_t size) {
  View v;
  if (!tensors.contains(key)) return v;
  const std::string w = "run: tensors." + key;
  const json& t = tensors[key];
  const int64_t off = int_field(t, w, "offset"), n = int_field(t, w, "nbytes");
  if (off < 0 || n < 0 || static_cast<size_t>(off + n) > size)
    throw ProtocolError(w + ": offset " + std::to_string(off) + " + nbytes " + std::to_string(n) +
                        " is outside the shared file of " + std::to_string(size) + " bytes");
  v.ptr = base + off, v.nbytes = static_cast<size_t>(n);
  for (const char* f : {"shape", "strides"}) {
    const json& a = field(t, w, f);
    if (!a.is_array()) throw ProtocolError(w + ": field '" + f + "': expected an array, got " + a.dump());
    for (const auto& x : a) (std::string(f) == "shape" ? v.shape : v.strides).push_back(x.get<int64_t>());
  }
  return v;
}

// Points a descriptor field at the tensor `key` of a request (absent: left NULL) and copies its strides.
struct Setter {
  const json& tensors;
  unsigned char* base;
  size_t size;
  template <class Ptr>
  void operator()(const char* key, Ptr& ptr, int64_t* strides, size_t rank) const {
    const View v = view(tensors, key, base, size);
    if (!v.ptr) return;
    ptr = reinterpret_cast<Ptr>(v.ptr);
    if (v.strides.size() != rank)
      throw ProtocolError(std::string("run: tensors.") + key + ": field 'strides': wrong rank");
    for (size_t i = 0; i < rank; ++i) strides[i] = v.strides[i];
  }
};

constexpr const char* kNoAbiModuleBackward =
    "module backward not supported through the plugin ABI (run_module is forward only)";

class PluginBackend final : public Backend {
 public:
  explicit PluginBackend(const std::string& path) : o_(open_plugin(path)) {}
  json hello() override {
    json h = {{"name", o_.vt->name},
              {"description", o_.vt->description ? o_.vt->description : ""},
              {"capabilities", capabilities_to_json(o_.caps)},
              {"supports", o_.vt->supports != nullptr},
              {"declarations", declarations_to_json(o_.declarations)}};
    for (const auto& f : o_.features) h["capabilities"]["features"].push_back(f);
    h["declarations"]["merge"] = o_.merge;
    h["declarations"]["module"] = o_.module;
    if (o_.vt->available) {
      char why[1024] = {};
      const bool ok = o_.vt->available(why, sizeof why) == 1;
      why[sizeof why - 1] = '\0';
      h["available"] = ok, h["unavailable_reason"] = ok ? "" : why;
    }
    return h;
  }
  Support supports(const Problem& p) override {
    if (!o_.vt->supports) return Support::yes();
    Described desc;
    describe(p, desc);
    char why[1024] = {};
    if (o_.vt->supports(&desc.d, why, sizeof why) == 1) return Support::yes();
    why[sizeof why - 1] = '\0';
    return Support::no(why[0] ? why : "plugin declined the case (no reason given)");
  }
  std::string run(const Problem& p, const json& tensors, unsigned char* base, size_t size) override {
    Described desc;
    describe(p, desc);
    if (const BlockMask* m = current_block_mask();
        m && std::find(o_.features.begin(), o_.features.end(), kBlockMaskFeature) != o_.features.end())
      chain_block_mask(desc, *m);
    attncheck_problem& d = desc.d;
    const Setter set{tensors, base, size};
    set_inputs(set, d);
    set_scales(set, p, desc);
    set("out", d.out, d.out_strides, 4), set("lse", d.lse, d.lse_strides, 3);
    set("weights", d.weights, d.weights_strides, 4);
    set("max_logit", desc.max_logit.max_logit, desc.max_logit.strides, p.max_logit == MaxLogitOut::heads ? 1 : 3);
    return call(d);
  }
  Support supports_backward(const Problem& p) override {
    if (!o_.declarations.backward)
      return Support::no("backward pass not supported (the plugin does not list \"backward\")");
    if (!o_.vt->supports) return Support::yes();
    Described desc;
    describe(p, desc);
    chain_backward(desc);
    char why[1024] = {};
    if (o_.vt->supports(&desc.d, why, sizeof why) == 1) return Support::yes();
    why[sizeof why - 1] = '\0';
    return Support::no(why[0] ? why : "plugin declined the backward of the case (no reason given)");
  }
  std::string run_backward(const Problem& p, const json& tensors, unsigned char* base, size_t size) override {
    Described desc;
    describe(p, desc);
    attncheck_problem& d = desc.d;
    const Setter set{tensors, base, size};
    set_inputs(set, d);
    attncheck_ext_backward& b = chain_backward(desc);
    set("out", b.out, b.out_strides, 4), set("lse", b.lse, b.lse_strides, 3), set("dout", b.dout, b.dout_strides, 4);
    set("dq", b.dq, b.dq_strides, 4), set("dk", b.dk, b.dk_strides, 4), set("dv", b.dv, b.dv_strides, 4);
    set("dbias", b.dbias, b.dbias_strides, 4);
    return call(d);
  }

  Support supports_merge(const MergeProblem& p) override { return plugin_supports_merge(o_, p); }
  std::string run_merge(const MergeProblem& p, const json& tensors, unsigned char* base, size_t size) override {
    attncheck_merge_problem m;
    describe_merge(p, m);
    const Setter set{tensors, base, size};
    set("o", m.o_in, m.o_in_strides, 5), set("out", m.o_out, m.o_out_strides, 4);
    set("lse", m.lse_in, m.lse_in_strides, 4), set("max", m.max_in, m.max_in_strides, 4);
    set("sum", m.sum_in, m.sum_in_strides, 4);
    set("out_lse", m.lse_out, m.lse_out_strides, 3), set("out_max", m.max_out, m.max_out_strides, 3);
    set("out_sum", m.sum_out, m.sum_out_strides, 3);
    return call_merge(o_, m);
  }
  Support supports_module(const ModuleProblem& m) override { return plugin_supports_module(o_, m); }
  std::string run_module(const ModuleProblem& p, const json& tensors, unsigned char* base, size_t size) override {
    DescribedModule dm;
    describe_module(p, dm);
    attncheck_module_problem& m = dm.m;
    const Setter set{tensors, base, size};
    set("mask", dm.attn.d.mask, dm.attn.d.mask_strides, 4), set("bias", dm.attn.d.bias, dm.attn.d.bias_strides, 4);
    set("keep", dm.attn.d.keep, dm.attn.d.keep_strides, 4);
    set("x", m.x, m.x_strides, 3), set("x2", m.x2, m.x2_strides, 3);
    set("wq", m.wq, m.wq_strides, 2), set("wk", m.wk, m.wk_strides, 2), set("wv", m.wv, m.wv_strides, 2);
    set("wqkv", m.wqkv, m.wqkv_strides, 2), set("wo", m.wo, m.wo_strides, 2);
    set("bq", m.bq, m.bq_strides, 1), set("bk", m.bk, m.bk_strides, 1), set("bv", m.bv, m.bv_strides, 1);
    set("bqkv", m.bqkv, m.bqkv_strides, 1), set("bo", m.bo, m.bo_strides, 1);
    set("y", m.y, m.y_strides, 3), set("weights", m.weights, m.weights_strides, 4);
    return call_module(o_, m);
  }
  Support supports_module_backward(const ModuleProblem&) override { return Support::no(kNoAbiModuleBackward); }
  std::string run_module_backward(const ModuleProblem&, const json&, unsigned char*, size_t) override {
    return kNoAbiModuleBackward;
  }

 private:
  // A quantized cache's scales (the request's k_scale, v_scale, stride 0 where shared) and MLA's value view.
  static void set_scales(const Setter& set, const Problem& p, Described& desc) {
    int64_t ks[4] = {}, vs[4] = {};
    const void *k_scale = nullptr, *v_scale = nullptr;
    if (p.kv_quantized()) set("k_scale", k_scale, ks, 4), set("v_scale", v_scale, vs, 4);
    set_mla_and_scales(desc, p, k_scale, {ks, ks + 4}, v_scale, {vs, vs + 4});
  }
  static void set_inputs(const Setter& set, attncheck_problem& d) {
    set("q", d.q, d.q_strides, 4), set("k", d.k, d.k_strides, 4), set("v", d.v, d.v_strides, 4);
    set("mask", d.mask, d.mask_strides, 4), set("bias", d.bias, d.bias_strides, 4),
        set("keep", d.keep, d.keep_strides, 4);
  }
  std::string call(const attncheck_problem& d) {
    char err[1024] = {};
    if (o_.vt->run(&d, err, sizeof err) == ATTNCHECK_STATUS_OK) return "";
    err[sizeof err - 1] = '\0';
    return err[0] ? err : "(no message)";
  }
  OpenedPlugin o_;
};

class ImplBackend final : public Backend {
 public:
  ImplBackend(ImplPtr impl, ModuleImplPtr module) : impl_(std::move(impl)), module_(std::move(module)) {}
  json hello() override {
    const Support a = impl_->available();
    Declarations d = impl_->declarations();
    d.backward = true;  // backward requests are answered; `supports` with pass "backward" decides each case
    json h = {{"name", impl_->name()},
              {"description", impl_->description()},
              {"capabilities", capabilities_to_json(impl_->capabilities())},
              {"supports", true},
              {"declarations", declarations_to_json(d)},
              {"available", a.ok},
              {"unavailable_reason", a.reason}};
    h["declarations"]["merge"] = true;   // merge requests are answered; `supports` with pass "merge" decides each case
    h["declarations"]["module"] = true;  // likewise module requests (pass "module") and their backward
    h["declarations"]["module_backward"] = true;
    return h;
  }
  Support supports(const Problem& p) override { return impl_->supports(p); }
  std::string run(const Problem& p, const json& tensors, unsigned char* base, size_t size) override {
    const Inputs in = inputs(p, tensors, base, size);
    Outputs out = make_outputs(p);
    for (bool to_shm : {false, true}) {  // poisoned outputs in, results out
      copy(tensors, base, size, "out", &out.out, to_shm);
      copy(tensors, base, size, "lse", out.lse ? &*out.lse : nullptr, to_shm);
      copy(tensors, base, size, "weights", out.weights ? &*out.weights : nullptr, to_shm);
      copy(tensors, base, size, "max_logit", out.max_logit ? &*out.max_logit : nullptr, to_shm);
      if (!to_shm) impl_->run(p, in, out);
    }
    return "";
  }
  Support supports_backward(const Problem& p) override { return impl_->supports_backward(p); }
  std::string run_backward(const Problem& p, const json& tensors, unsigned char* base, size_t size) override {
    const Inputs in = inputs(p, tensors, base, size);
    Outputs fwd = make_outputs(p);
    copy(tensors, base, size, "out", &fwd.out, false);
    if (fwd.lse) copy(tensors, base, size, "lse", &*fwd.lse, false);
    Tensor dout = make_dout(p);
    copy(tensors, base, size, "dout", &dout, false);
    Gradients g = make_gradients(p);
    for (bool to_shm : {false, true}) {  // poisoned gradients in, results out
      copy(tensors, base, size, "dq", &g.dq, to_shm), copy(tensors, base, size, "dk", &g.dk, to_shm);
      copy(tensors, base, size, "dv", &g.dv, to_shm);
      copy(tensors, base, size, "dbias", g.dbias ? &*g.dbias : nullptr, to_shm);
      if (!to_shm) impl_->run_backward(p, in, fwd, dout, g);
    }
    return "";
  }
  Support supports_merge(const MergeProblem& p) override { return impl_->supports_merge(p); }
  std::string run_merge(const MergeProblem& p, const json& tensors, unsigned char* base, size_t size) override {
    StoredStates in = make_merge_inputs(p), out = make_merge_outputs(p);
    copy(tensors, base, size, "o", &in.o, false);
    for (auto [key, t] : {std::pair{"lse", &in.lse}, std::pair{"max", &in.max}, std::pair{"sum", &in.sum}})
      copy(tensors, base, size, key, *t ? &**t : nullptr, false);
    for (bool to_shm : {false, true}) {  // poisoned outputs in, results out
      copy(tensors, base, size, "out", &out.o, to_shm);
      for (auto [key, t] :
           {std::pair{"out_lse", &out.lse}, std::pair{"out_max", &out.max}, std::pair{"out_sum", &out.sum}})
        copy(tensors, base, size, key, *t ? &**t : nullptr, to_shm);
      if (!to_shm) impl_->run_merge(p, in, out);
    }
    return "";
  }
  Support supports_module(const ModuleProblem& m) override {
    const ModuleImplPtr& e = module_;
    return e ? e->supports(m) : Support::no(impl_->name() + " has no module entry");
  }
  std::string run_module(const ModuleProblem& m, const json& tensors, unsigned char* base, size_t size) override {
    const ModuleImplPtr& e = module_;
    ModuleInputs in = make_module_inputs(m);
    for (auto [key, t] : module_input_tensors(in)) copy(tensors, base, size, key, const_cast<Tensor*>(t), false);
    ModuleOutputs out = make_module_outputs(m);
    for (bool to_shm : {false, true}) {  // poisoned outputs in, results out
      copy(tensors, base, size, "y", &out.y, to_shm);
      copy(tensors, base, size, "weights", out.weights ? &*out.weights : nullptr, to_shm);
      if (!to_shm) e->run(m, in, out);
    }
    return "";
  }
  Support supports_module_backward(const ModuleProblem& m) override {
    const ModuleImplPtr& e = module_;
    if (!e) return Support::no(impl_->name() + " has no module entry");
    if (Support s = e->supports(m); !s.ok) return s;
    return e->supports_backward(m);
  }
  std::string run_module_backward(const ModuleProblem& m, const json& tensors, unsigned char* base,
                                  size_t size) override {
    const ModuleImplPtr& e = module_;
    ModuleInputs in = make_module_inputs(m);
    for (auto [key, t] : module_input_tensors(in)) copy(tensors, base, size, key, const_cast<Tensor*>(t), false);
    Tensor dy(m.attn.dtype, {m.attn.B, m.attn.Lq, m.d_out});
    copy(tensors, base, size, "dy", &dy, false);
    ModuleGradOutputs g;
    for (const std::string& name : module_grad_names(m)) {
      const Tensor& input = module_grad_input(in, name);
      g.emplace(name, Tensor(input.dtype, input.shape));
    }
    for (bool to_shm : {false, true}) {  // poisoned gradients in, results out
      for (auto& [name, t] : g) copy(tensors, base, size, name.c_str(), &t, to_shm);
      if (!to_shm) e->run_backward(m, in, dy, g);
    }
    return "";
  }

 private:
  static Tensor load(const json& tensors, unsigned char* base, size_t size, const char* key, DType t) {
    const View v = view(tensors, key, base, size);
    Tensor x(t, v.shape);
    x.strides = v.strides;
    for (size_t d = 0; d < x.shape.size(); ++d)
      if (x.shape[d] == 1 && x.strides[d] == 0) x.strides[d] = 1;  // broadcast dims: any stride reads element 0
    x.bytes.assign(v.ptr, v.ptr + v.nbytes);
    return x;
  }
  static Inputs inputs(const Problem& p, const json& tensors, unsigned char* base, size_t size) {
    auto ld = [&](const char* key, DType t) { return load(tensors, base, size, key, t); };
    const DType kv = kv_storage_dtype(p);  // a quantized cache's codes
    Inputs in{ld("q", p.dtype), ld("k", kv), ld("v", kv), {}, {}, {}, {}, {}};
    if (p.kv_quantized()) in.k_scale = ld("k_scale", p.kv_scale_dtype), in.v_scale = ld("v_scale", p.kv_scale_dtype);
    if (p.mask_shape) in.mask = ld("mask", DType::u8);
    if (p.bias_shape) in.bias = ld("bias", p.bias_dtype);
    if (p.dropout_p > 0) in.keep = ld("keep", DType::u8);
    return in;
  }
  // Copies the tensor `key` of the shared file into `t` or back; the byte counts must agree.
  static void copy(const json& tensors, unsigned char* base, size_t size, const char* key, Tensor* t, bool to_shm) {
    const View v = view(tensors, key, base, size);
    if (!t || !v.ptr) return;
    if (v.nbytes != t->bytes.size())
      throw ProtocolError(std::string("run: tensors.") + key + ": field 'nbytes' does not match the problem");
    to_shm ? std::memcpy(v.ptr, t->bytes.data(), v.nbytes) : std::memcpy(t->bytes.data(), v.ptr, v.nbytes);
  }
  ImplPtr impl_;
  ModuleImplPtr module_;
};

void reply(int fd, const json& j) {
  const std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  for (size_t done = 0; done < line.size();) {
    const ssize_t w = ::write(fd, line.data() + done, line.size() - done);
    if (w <= 0) std::_Exit(3);  // attncheck is gone
    done += static_cast<size_t>(w);
  }
}

// Runs one computation: "" or the implementation's own error message; a malformed request stays a ProtocolError.
template <class F>
std::string attempt(F&& run) {
  try {
    return run();
  } catch (const ProtocolError&) {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  }
}

// The reply to a run, backward or merge request.
json outcome(const std::string& type, int64_t id, const std::string& err) {
  return err.empty() ? json{{"type", type}, {"id", id}, {"status", "ok"}}
                     : json{{"type", type}, {"id", id}, {"status", "error"}, {"message", err}};
}

}  // namespace

std::unique_ptr<Backend> plugin_backend(const std::string& path) { return std::make_unique<PluginBackend>(path); }
std::unique_ptr<Backend> impl_backend(ImplPtr impl, ModuleImplPtr module) {
  return std::make_unique<ImplBackend>(std::move(impl), std::move(module));
}

int serve(Backend& backend) {
  // The protocol owns the real stdout; anything the implementation prints goes to stderr instead.
  const int proto = ::dup(1);
  ::dup2(2, 1);
  Shm shm;
  int protocol = kMinProtocolVersion;  // as negotiated by hello
  std::string line;
  while (std::getline(std::cin, line)) {
    json req;
    int64_t id = -1;
    try {
      req = json::parse(line);
      const std::string type = str_field(req, "request", "type");
      if (type == "bye") return 0;
      if (type == "hello") {  // the highest version both speak
        int version = 0;
        if (req.contains("protocols") && req["protocols"].is_array())
          for (const auto& v : req["protocols"])
            if (v.is_number_integer() && v.get<int>() >= kMinProtocolVersion && v.get<int>() <= kProtocolVersion)
              version = std::max(version, v.get<int>());
        if (version == 0)
          throw ProtocolError("hello: field 'protocols': none of " +
                              (req.contains("protocols") ? req["protocols"].dump() : "[]") + " is spoken here (1.." +
                              std::to_string(kProtocolVersion) + ")");
        protocol = version;
        json h = backend.hello();
        h["type"] = "hello", h["protocol"] = version;
        if (version < 2) h["declarations"]["backward"] = false;  // protocol 1 has no backward message
        reply(proto, h);
        continue;
      }
      id = int_field(req, type, "id");
      const bool merge_pass = type == "supports" && req.contains("pass") && req["pass"] == "merge";
      if (merge_pass) {
        const Support s = backend.supports_merge(merge_problem_from_json(field(req, type, "problem"), type));
        reply(proto, {{"type", "supports"}, {"id", id}, {"ok", s.ok}, {"reason", s.reason}});
        continue;
      }
      if (type == "merge") {
        const MergeProblem m = merge_problem_from_json(field(req, type, "problem"), type);
        shm.map(str_field(req, type, "shm"), static_cast<size_t>(int_field(req, type, "shm_size")));
        const Support s = backend.supports_merge(m);
        reply(proto, outcome(type, id, !s.ok ? s.reason : attempt([&] {
                               return backend.run_merge(m, field(req, type, "tensors"), shm.base, shm.size);
                             })));
        continue;
      }
      const std::string pass =
          type == "supports" && req.contains("pass") && req["pass"].is_string() ? req["pass"].get<std::string>() : "";
      if (pass == "module" || pass == "module_backward") {
        const ModuleProblem m = module_problem_from_json(field(req, type, "problem"), type);
        const Support s = pass == "module" ? backend.supports_module(m) : backend.supports_module_backward(m);
        reply(proto, {{"type", "supports"}, {"id", id}, {"ok", s.ok}, {"reason", s.reason}});
        continue;
      }
      if (type == "module" || type == "module_backward") {
        const ModuleProblem m = module_problem_from_json(field(req, type, "problem"), type);
        shm.map(str_field(req, type, "shm"), static_cast<size_t>(int_field(req, type, "shm_size")));
        const bool fwd = type == "module";
        const Support s = fwd ? backend.supports_module(m) : backend.supports_module_backward(m);
        reply(proto, outcome(type, id, !s.ok ? s.reason : attempt([&] {
                               const json& tensors = field(req, type, "tensors");
                               return fwd ? backend.run_module(m, tensors, shm.base, shm.size)
                                          : backend.run_module_backward(m, tensors, shm.base, shm.size);
                             })));
        continue;
      }
      const Problem p = problem_from_json(field(req, type, "problem"), type);
      const bool backward =
          type == "backward" || (type == "supports" && req.contains("pass") && req["pass"] == "backward");
      if (backward && protocol < 2)
        throw ProtocolError(type + ": the backward pass needs protocol 2 (this session speaks " +
                            std::to_string(protocol) + ")");
      if (type == "supports") {
        const Support s = backward ? backend.supports_backward(p) : backend.supports(p);
        reply(proto, {{"type", "supports"}, {"id", id}, {"ok", s.ok}, {"reason", s.reason}});
      } else if (type == "run" || type == "backward") {
        shm.map(str_field(req, type, "shm"), static_cast<size_t>(int_field(req, type, "shm_size")));
        reply(proto,
              outcome(type, id, attempt([&] {
                        const json& tensors = field(req, type, "tensors");
                        Schedule sched;  // the run's schedule (a schedule check), else the implementation's own choice
                        if (req.contains("schedule")) {
                          const json& s = req["schedule"];
                          if (!s.is_object())
                            throw ProtocolError(type + ": field 'schedule': expected an object, got " + s.dump());
                          sched.threads = static_cast<int>(int_field(s, type + ": schedule", "threads"));
                          sched.num_splits = static_cast<int>(int_field(s, type + ": schedule", "num_splits"));
                          sched.reversed = bool_field(s, type + ": schedule", "reversed");
                        }
                        const ScheduleScope scope(sched);
                        std::optional<BlockMask> bm;  // the block mask the caller hands the kernel (plugin.h tag 12)
                        if (!backward && req.contains("block_mask"))
                          bm = block_mask_from_json(req["block_mask"], type, p);
                        const BlockMaskScope handed(bm ? &*bm : nullptr);
                        return backward ? backend.run_backward(p, tensors, shm.base, shm.size)
                                        : backend.run(p, tensors, shm.base, shm.size);
                      })));
      } else {
        throw ProtocolError(
            "request: field 'type': expected hello, supports, run, backward, merge, module, module_backward or bye, "
            "got \"" +
            type + "\"");
      }
    } catch (const std::exception& e) {
      json r = {{"type", "error"}, {"message", e.what()}};
      if (id >= 0) r["id"] = id;
      reply(proto, r);
    }
  }
  return 0;
}

}  // namespace attncheck::worker
