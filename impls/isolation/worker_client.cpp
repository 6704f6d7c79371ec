// The client side of the worker protocol: starts the child, shakes hands, and runs each case through a shared-memory
// file laid out as [guard][tensor][slack+guard]... . Guards are 0xFF bytes (NaN in every float dtype); after each
// call inputs are compared with the caller's bytes and every guard is checked. Failures become RunFailure.
#include "worker_client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "../plugin_abi.hpp"
#include "attncheck/backward.hpp"
#include "attncheck/declarations.hpp"
#include "attncheck/features.hpp"
#include "attncheck/module_impl.hpp"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/run_failure.hpp"
#include "attncheck/state.hpp"
#include "worker_json.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define ATTNCHECK_WORKER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNCHECK_WORKER_ASAN 1
#endif
#endif

extern char** environ;

namespace attncheck {

using worker::json;

namespace {
// The environment of a worker started under --memory-limit, or empty for the parent's. A worker built with
// AddressSanitizer (tools/sanitize.sh) cannot start under RLIMIT_AS: its runtime reserves terabytes of shadow
// memory at start and dies when that is refused. There the limit goes to the worker's ASan allocator instead
// (ASAN_OPTIONS): an allocation larger than the limit, or any once the worker's resident memory passed it, returns
// null, as under RLIMIT_AS. Built before fork, since the child may only make async-signal-safe calls.
std::vector<std::string> limited_environment([[maybe_unused]] int64_t memory_limit_mb) {
  std::vector<std::string> env;
#ifdef ATTNCHECK_WORKER_ASAN
  if (memory_limit_mb <= 0) return env;
  const char* old = std::getenv("ASAN_OPTIONS");
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "ASAN_OPTIONS=", 13) != 0) env.emplace_back(*e);
  const std::string mb = std::to_string(memory_limit_mb);
  env.push_back("ASAN_OPTIONS=" + std::string(old && *old ? old + std::string(":") : "") +
                "allocator_may_return_null=1:max_allocation_size_mb=" + mb + ":soft_rss_limit_mb=" + mb);
#endif
  return env;
}
}  // namespace

double default_timeout(const Problem& p) {
  const double flops = 2.0 * static_cast<double>(p.B * p.Hq) * static_cast<double>(p.Lq) * static_cast<double>(p.Lk) *
                       static_cast<double>(p.Dqk + p.Dv);
  return 10.0 + flops / 1e9;
}

std::vector<std::string> plugin_host_argv(const std::string& attncheck_exe, const std::string& plugin_path) {
  const char* env = std::getenv("ATTNCHECK_WORKER_HOST");
  return {env && *env ? env : attncheck_exe, "worker-host", "--plugin", plugin_path};
}

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kStderrTail = 4096;
constexpr unsigned char kCanary = 0xFF;

size_t round_up(size_t n) { return (n + kPage - 1) / kPage * kPage; }

std::string signal_text(int sig) {
  const char* d = strsignal(sig);
  return "signal " + std::to_string(sig) + " (" + (d ? d : "?") + ")";
}

// One tensor's place in the shared file.
struct Slot {
  std::string name;
  const Tensor* src = nullptr;  // inputs: compared after the call
  Tensor* dst = nullptr;        // outputs: copied back
  size_t offset = 0, nbytes = 0;
};

class WorkerImpl final : public Impl, public ModuleProvider, public std::enable_shared_from_this<WorkerImpl> {
 public:
  explicit WorkerImpl(WorkerOptions o) : o_(std::move(o)) {
    if (o_.argv.empty()) throw PluginError("worker: empty command");
    if (o_.label.empty())
      for (const auto& a : o_.argv) o_.label += (o_.label.empty() ? "" : " ") + a;
    struct sigaction sa {};
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, nullptr);  // a dead worker's stdin must be an EPIPE, not the end of attncheck
    try {
      start();
    } catch (const std::exception& e) {
      // The worker host refusing a library says why on stderr ("attncheck: error: plugin X: ABI version ..."):
      // that line is the error. Otherwise the failure itself, named once by the label.
      const std::string host_error = "attncheck: error: ";
      if (const auto at = tail_.rfind(host_error); at != std::string::npos) {
        std::string line = tail_.substr(at + host_error.size());
        throw PluginError(line.substr(0, line.find('\n')));
      }
      const std::string m = e.what();
      throw PluginError(m.rfind(o_.label, 0) == 0 ? m : o_.label + ": " + m);
    }
    name_ = hello_name_;
  }
  ~WorkerImpl() override {
    stop(true);
    if (shm_) munmap(shm_, shm_size_);
    if (shm_fd_ >= 0) ::close(shm_fd_);
    if (!shm_path_.empty()) ::unlink(shm_path_.c_str());
  }

  std::string name() const override { return name_; }
  std::string description() const override { return description_ + " [isolated: " + o_.label + "]"; }
  Capabilities capabilities() const override { return caps_; }
  Support available() const override { return available_; }
  Declarations declarations() const override { return declarations_; }

  Support supports(const Problem& p) const override {
    if (Support s = check_capabilities(caps_, p); !s.ok) return s;
    if (Support s = declared_extensions(p, features_, "worker"); !s.ok) return s;
    if (!has_supports_) return Support::yes();
    return ask_supports(p, "forward");
  }

  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    std::vector<Slot> slots;
    add_inputs(slots, in);
    add(slots, "out", nullptr, &out.out);
    if (out.lse) add(slots, "lse", nullptr, &*out.lse);
    if (out.weights) add(slots, "weights", nullptr, &*out.weights);
    if (out.max_logit) add(slots, "max_logit", nullptr, &*out.max_logit);
    exchange("run", p, slots);
  }

  // Protocol 2: the backward message, for a worker that declares `backward`.
  Support supports_backward(const Problem& p) const override {
    if (protocol_ < 2)
      return Support::no("backward pass not supported (the worker speaks protocol " + std::to_string(protocol_) +
                         ", which has no backward message)");
    if (!declarations_.backward)
      return Support::no("backward pass not supported (the worker does not declare backward)");
    if (p.mla)  // the protocol's dk and dv are two tensors; nothing says they are one latent cache's gradient
      return Support::no("backward of absorbed MLA not supported through the worker protocol");
    if (Support s = check_capabilities(caps_, p); !s.ok) return s;
    if (Support s = declared_extensions(p, features_, "worker"); !s.ok) return s;
    if (!has_supports_) return Support::yes();
    return ask_supports(p, "backward");
  }

  // The merge message (docs/worker-protocol.md 2c), for a worker whose hello declares "merge": true.
  Support supports_merge(const MergeProblem& p) const override {
    if (!merge_) return Support::no("merge not supported (the worker does not declare merge)");
    if (!has_supports_) return Support::yes();
    std::lock_guard lock(mu_);
    ensure_running(p.name);
    const int64_t id = ++next_id_;
    const json request = {
        {"type", "supports"}, {"id", id}, {"pass", "merge"}, {"problem", worker::merge_problem_to_json(p)}};
    return supports_reply(call(request, "supports", id, p.name, o_.startup_timeout_s), id, "merge");
  }
  void run_merge(const MergeProblem& p, const StoredStates& in, StoredStates& out) const override {
    std::vector<Slot> slots;
    add(slots, "o", &in.o, nullptr);
    for (auto [name, t] : {std::pair{"lse", &in.lse}, std::pair{"max", &in.max}, std::pair{"sum", &in.sum}})
      if (*t) add(slots, name, &**t, nullptr);
    add(slots, "out", nullptr, &out.o);
    for (auto [name, t] :
         {std::pair{"out_lse", &out.lse}, std::pair{"out_max", &out.max}, std::pair{"out_sum", &out.sum}})
      if (*t) add(slots, name, nullptr, &**t);
    exchange("merge", p.name, worker::merge_problem_to_json(p), o_.timeout_s > 0 ? o_.timeout_s : 10.0, slots);
  }

  // The module message (docs/worker-protocol.md 2d), for a worker whose hello declares "module": true.
  ModuleImplPtr module_entry() const override;
  Support supports_module(const ModuleProblem& m, const std::string& pass = "module") const {
    if (pass == "module_backward" && !module_backward_)
      return Support::no("module backward not supported (the worker does not declare module_backward)");
    if (!has_supports_) return Support::yes();
    std::lock_guard lock(mu_);
    const std::string name = m.name();
    ensure_running(name);
    const int64_t id = ++next_id_;
    const json request = {
        {"type", "supports"}, {"id", id}, {"pass", pass}, {"problem", worker::module_problem_to_json(m)}};
    return supports_reply(call(request, "supports", id, name, o_.startup_timeout_s), id, pass);
  }
  void run_module_backward(const ModuleProblem& m, const ModuleInputs& in, const Tensor& dy,
                           ModuleGradOutputs& g) const {
    std::vector<Slot> slots;
    for (auto [name, t] : worker::module_input_tensors(in)) add(slots, name, t, nullptr);
    add(slots, "dy", &dy, nullptr);
    for (auto& [name, t] : g) add(slots, name, nullptr, &t);
    const double timeout = o_.timeout_s > 0 ? o_.timeout_s : 2.5 * 2.0 * default_timeout(m.attn);  // as backward
    exchange("module_backward", m.name(), worker::module_problem_to_json(m), timeout, slots);
  }
  void run_module(const ModuleProblem& m, const ModuleInputs& in, ModuleOutputs& out) const {
    std::vector<Slot> slots;
    for (auto [name, t] : worker::module_input_tensors(in)) add(slots, name, t, nullptr);
    add(slots, "y", nullptr, &out.y);
    if (out.weights) add(slots, "weights", nullptr, &*out.weights);
    // Its default timeout: the attention's, plus the projections' work (as many flops again, at most, at this size)
    const double timeout = o_.timeout_s > 0 ? o_.timeout_s : 2.0 * default_timeout(m.attn);
    exchange("module", m.name(), worker::module_problem_to_json(m), timeout, slots);
  }

  void run_backward(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout,
                    Gradients& g) const override {
    std::vector<Slot> slots;
    add_inputs(slots, in);
    add(slots, "out", &fwd.out, nullptr);  // the forward's results and dout are inputs: checked unchanged
    if (fwd.lse) add(slots, "lse", &*fwd.lse, nullptr);
    add(slots, "dout", &dout, nullptr);
    add(slots, "dq", nullptr, &g.dq), add(slots, "dk", nullptr, &g.dk), add(slots, "dv", nullptr, &g.dv);
    if (g.dbias) add(slots, "dbias", nullptr, &*g.dbias);
    exchange("backward", p, slots);
  }

 private:
  Support ask_supports(const Problem& p, const std::string& pass) const {
    std::lock_guard lock(mu_);
    ensure_running(p.name());
    const int64_t id = ++next_id_;
    json request = {{"type", "supports"}, {"id", id}, {"problem", worker::problem_to_json(p)}};
    if (pass == "backward") request["pass"] = pass;  // protocol 2; absent = forward (protocol 1 requests)
    return supports_reply(call(request, "supports", id, p.name(), o_.startup_timeout_s), id, pass);
  }
  Support supports_reply(const json& reply, int64_t id, const std::string& pass) const {
    const std::string where = o_.label + ": reply to supports " + std::to_string(id);
    if (worker::bool_field(reply, where, "ok")) return Support::yes();
    const std::string why =
        reply.contains("reason") && reply["reason"].is_string() ? reply["reason"].get<std::string>() : "";
    return Support::no(why.empty() ? "worker declined the " + pass + " of the case (no reason given)" : why);
  }

  static void add(std::vector<Slot>& slots, const std::string& n, const Tensor* s, Tensor* d) {
    const Tensor& t = s ? *s : *d;
    slots.push_back({n, s, d, 0, t.bytes.size()});
  }
  static void add_inputs(std::vector<Slot>& slots, const Inputs& in) {
    add(slots, "q", &in.q, nullptr), add(slots, "k", &in.k, nullptr), add(slots, "v", &in.v, nullptr);
    if (in.mask) add(slots, "mask", &*in.mask, nullptr);
    if (in.bias) add(slots, "bias", &*in.bias, nullptr);
    if (in.keep) add(slots, "keep", &*in.keep, nullptr);
    if (in.k_scale) add(slots, "k_scale", &*in.k_scale, nullptr);  // a quantized cache: k and v hold codes
    if (in.v_scale) add(slots, "v_scale", &*in.v_scale, nullptr);
  }

  // One run or backward request: every slot in the shared file between guard pages, the call under the case's
  // timeout, then inputs compared and guards checked (modified-input / out-of-bounds), outputs copied back.
  void exchange(const std::string& type, const Problem& p, std::vector<Slot>& slots) const {
    // The backward does about 2.5x the forward's work (FlashAttention's count): its default timeout scales with it.
    const double timeout = o_.timeout_s > 0 ? o_.timeout_s : (type == "backward" ? 2.5 : 1.0) * default_timeout(p);
    exchange(type, p.name(), worker::problem_to_json(p), timeout, slots);
  }
  void exchange(const std::string& type, const std::string& case_name, const json& problem, double timeout,
                std::vector<Slot>& slots) const {
    std::lock_guard lock(mu_);
    ensure_running(case_name);
    size_t size = kPage;  // a guard page before the first tensor
    for (auto& s : slots) {
      s.offset = size;
      size += round_up(s.nbytes) + kPage;  // slack up to the page, then a guard page
    }
    map_shm(size);
    std::memset(shm_, kCanary, shm_size_);
    json tensors = json::object();
    for (const auto& s : slots) {
      const Tensor& t = s.src ? *s.src : *s.dst;
      std::memcpy(shm_ + s.offset, t.bytes.data(), s.nbytes);
      std::vector<int64_t> strides = t.strides;
      for (size_t d = 0; d < strides.size(); ++d)  // broadcast dims of mask, bias and dbias: stride 0
        if ((s.name == "mask" || s.name == "bias" || s.name == "dbias" || s.name == "k_scale" || s.name == "v_scale") &&
            t.shape[d] == 1)
          strides[d] = 0;
      tensors[s.name] = {{"offset", s.offset},
                         {"nbytes", s.nbytes},
                         {"dtype", worker::dtype_name(t.dtype)},
                         {"shape", t.shape},
                         {"strides", strides}};
    }
    const int64_t id = ++next_id_;
    json request = {{"type", type},          {"id", id},          {"problem", problem}, {"shm", shm_path_},
                    {"shm_size", shm_size_}, {"tensors", tensors}};
    if (const Schedule& s = current_schedule(); !s.is_default())  // a schedule check: only knobs the worker declared
      request["schedule"] = {{"threads", s.threads}, {"num_splits", s.num_splits}, {"reversed", s.reversed}};
    if (const BlockMask* m = current_block_mask(); m && type == "run" && features_.count(kBlockMaskFeature))
      request["block_mask"] = worker::block_mask_to_json(*m);  // handed only to a worker that asks for it
    const json reply = call(request, type, id, case_name, timeout);
    const std::string where = o_.label + ": reply to " + type + " " + std::to_string(id);
    const std::string status = worker::str_field(reply, where, "status");
    check_memory(slots, case_name);
    if (status == "error") {
      const std::string m =
          reply.contains("message") && reply["message"].is_string() ? reply["message"].get<std::string>() : "";
      throw std::runtime_error(name_ + " (" + o_.label + "): " + type + " failed: " + (m.empty() ? "(no message)" : m));
    }
    if (status != "ok") {
      stop(true);
      throw worker::ProtocolError(where + ": field 'status': expected \"ok\" or \"error\", got \"" + status + "\"");
    }
    for (const auto& s : slots)
      if (s.dst) std::memcpy(s.dst->bytes.data(), shm_ + s.offset, s.nbytes);
  }

  // Inputs unchanged, guards intact; otherwise modified-input / out-of-bounds naming the tensor and the offset.
  void check_memory(const std::vector<Slot>& slots, const std::string& case_name) const {
    for (const auto& s : slots) {
      if (!s.src || std::memcmp(shm_ + s.offset, s.src->bytes.data(), s.nbytes) == 0) continue;
      size_t i = 0;
      while (shm_[s.offset + i] == s.src->bytes[i]) ++i;
      const size_t es = dtype_size(s.src->dtype);
      throw RunFailure("modified-input", name_ + " wrote into its input '" + s.name + "' on " + case_name +
                                             ": first changed element " + std::to_string(i / es) + " (byte " +
                                             std::to_string(i) + ")");
    }
    size_t prev_end = 0;
    for (size_t k = 0; k <= slots.size(); ++k) {
      const size_t begin = prev_end, end = k < slots.size() ? slots[k].offset : shm_size_;
      for (size_t b = begin; b < end; ++b) {
        if (shm_[b] == kCanary) continue;
        // Blame the nearer tensor: bytes after the previous one or before the next one.
        const bool after = k > 0 && (k == slots.size() || b - begin < end - b);
        const Slot& t = after ? slots[k - 1] : slots[k];
        const std::string where = after ? std::to_string(b - begin) + " bytes past the end of '" + t.name + "'"
                                        : std::to_string(end - b) + " bytes before the start of '" + t.name + "'";
        throw RunFailure("out-of-bounds", name_ + " wrote outside its buffers on " + case_name + ": guard band byte " +
                                              where + " (byte offset " +
                                              std::to_string(static_cast<int64_t>(b) - static_cast<int64_t>(t.offset)) +
                                              " from the start of '" + t.name + "')");
      }
      if (k < slots.size()) prev_end = slots[k].offset + slots[k].nbytes;
    }
  }

  void map_shm(size_t size) const {
    if (shm_ && size <= shm_size_) return;
    if (shm_) munmap(shm_, shm_size_), shm_ = nullptr;
    if (shm_fd_ < 0) {
      std::string path = "/dev/shm/attncheck-" + std::to_string(::getpid()) + "-XXXXXX";
      shm_fd_ = ::mkstemp(path.data());
      if (shm_fd_ < 0) throw std::runtime_error("worker: cannot create " + path + ": " + std::strerror(errno));
      shm_path_ = path;
    }
    if (::ftruncate(shm_fd_, static_cast<off_t>(size)) != 0)
      throw std::runtime_error("worker: cannot size " + shm_path_ + " to " + std::to_string(size) +
                               " bytes: " + std::strerror(errno));
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd_, 0);
    if (m == MAP_FAILED) throw std::runtime_error("worker: cannot map " + shm_path_ + ": " + std::strerror(errno));
    shm_ = static_cast<unsigned char*>(m);
    shm_size_ = size;
  }

  void ensure_running(const std::string& case_name) const {
    if (pid_ > 0) return;
    start();
    if (hello_name_ != name_)
      throw std::runtime_error(o_.label + ": restarted for " + case_name + " but now calls itself '" + hello_name_ +
                               "' instead of '" + name_ + "'");
  }

  void start() const {
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC))
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    std::vector<char*> argv;
    for (const auto& a : o_.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env = limited_environment(o_.memory_limit_mb);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {  // child: only async-signal-safe calls until exec
      ::setpgid(0, 0);
      ::dup2(in[0], 0), ::dup2(out[1], 1), ::dup2(err[1], 2);
      if (!env.empty()) {
        ::execvpe(argv[0], argv.data(), envp.data());  // ASan: the limit is in ASAN_OPTIONS
      } else {
        if (o_.memory_limit_mb > 0) {
          const rlim_t bytes = static_cast<rlim_t>(o_.memory_limit_mb) << 20;
          const struct rlimit r { bytes, bytes };
          ::setrlimit(RLIMIT_AS, &r);
        }
        ::execvp(argv[0], argv.data());
      }
      const char msg[] = "worker: exec failed\n";
      (void)!::write(2, msg, sizeof msg - 1);
      ::_exit(127);
    }
    ::close(in[0]), ::close(out[1]), ::close(err[1]);
    pid_ = pid, to_ = in[1], from_ = out[0], err_ = err[0];
    rbuf_.clear(), tail_.clear();
    json versions = json::array();
    for (int v = worker::kMinProtocolVersion; v <= worker::kProtocolVersion; ++v) versions.push_back(v);
    const json h =
        call({{"type", "hello"}, {"protocols", versions}}, "hello", -1, "the handshake", o_.startup_timeout_s);
    read_hello(h);
  }

  void read_hello(const json& h) const {
    const std::string w = o_.label + ": hello";
    const int64_t version = worker::int_field(h, w, "protocol");
    if (version < worker::kMinProtocolVersion || version > worker::kProtocolVersion)
      throw worker::ProtocolError(w + ": field 'protocol': expected 1 or 2, got " + h["protocol"].dump());
    protocol_ = static_cast<int>(version);
    hello_name_ = worker::str_field(h, w, "name");
    if (hello_name_.empty()) throw worker::ProtocolError(w + ": field 'name' is empty");
    description_ = h.contains("description") && h["description"].is_string() ? h["description"].get<std::string>() : "";
    caps_ = worker::capabilities_from_json(worker::field(h, w, "capabilities"), w);
    features_.clear();
    for (const auto& f : h["capabilities"]["features"]) features_.insert(f.get<std::string>());
    available_ = Support::yes();
    if (h.contains("available") && !worker::bool_field(h, w, "available"))
      available_ = Support::no(h.contains("unavailable_reason") && h["unavailable_reason"].is_string()
                                   ? h["unavailable_reason"].get<std::string>()
                                   : "the worker says it is unavailable (no reason given)");
    has_supports_ = h.contains("supports") && worker::bool_field(h, w, "supports");
    merge_ = h.contains("declarations") && h["declarations"].is_object() && h["declarations"].contains("merge") &&
             worker::bool_field(h["declarations"], w + ": declarations", "merge");
    module_ = h.contains("declarations") && h["declarations"].is_object() && h["declarations"].contains("module") &&
              worker::bool_field(h["declarations"], w + ": declarations", "module");
    module_backward_ = module_ && h["declarations"].contains("module_backward") &&
                       worker::bool_field(h["declarations"], w + ": declarations", "module_backward");
    declarations_ = h.contains("declarations")
                        ? worker::declarations_from_json(h["declarations"], w, Impl::declarations())
                        : Impl::declarations();
  }

  // Send one request and wait for the reply with the same type and id; the child's death, silence or a malformed
  // reply ends it (stop) and throws.
  json call(const json& request, const std::string& type, int64_t id, const std::string& case_name,
            double timeout) const {
    const std::string line = request.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    for (size_t done = 0; done < line.size();) {
      const ssize_t w = ::write(to_, line.data() + done, line.size() - done);
      if (w < 0 && errno == EINTR) continue;
      // EPIPE: it stopped reading or is gone. What it wrote before may still be in the pipe (a worker may answer
      // and exit at once), so read on: a reply is taken, end of file is its death.
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
    for (;;) {
      if (const auto nl = rbuf_.find('\n'); nl != std::string::npos) {
        const std::string msg = rbuf_.substr(0, nl);
        rbuf_.erase(0, nl + 1);
        json j;
        std::string where = o_.label + ": reply to " + type;
        if (id >= 0) where.append(" ").append(std::to_string(id));  // not " " + to_string(): gcc 12 -Wrestrict
        try {
          j = json::parse(msg);
          if (worker::str_field(j, where, "type") == "error")
            throw worker::ProtocolError(where + ": the worker reports a protocol error: " +
                                        (j.contains("message") ? j["message"].dump() : "(no message)"));
          if (worker::str_field(j, where, "type") != type)
            throw worker::ProtocolError(where + ": field 'type': expected \"" + type + "\", got " + j["type"].dump());
          if (id >= 0 && worker::int_field(j, where, "id") != id)
            throw worker::ProtocolError(where + ": field 'id': expected " + std::to_string(id) + ", got " +
                                        j["id"].dump());
        } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
          stop(true);
          throw worker::ProtocolError(where + ": not JSON (" + e.what() + "): " + msg.substr(0, 200));
        } catch (const worker::ProtocolError&) {
          stop(true);
          throw;
        }
        return j;
      }
      const auto left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) {
        stop(true);
        char t[32];
        std::snprintf(t, sizeof t, "%.1f", timeout);
        throw RunFailure("timeout", name_or_label() + " gave no reply to " + type + " of " + case_name + " within " +
                                        t + " s (killed; --timeout S to change)" + tail_text());
      }
      pollfd fds[2] = {{from_, POLLIN, 0}, {err_, POLLIN, 0}};
      ::poll(fds, err_ >= 0 ? 2 : 1, static_cast<int>(std::min(left * 1000.0, 1000.0)) + 1);
      char buf[65536];
      if (err_ >= 0 && (fds[1].revents & (POLLIN | POLLHUP))) {
        const ssize_t n = ::read(err_, buf, sizeof buf);
        if (n > 0) append_tail(buf, static_cast<size_t>(n));
        if (n == 0) ::close(err_), err_ = -1;
      }
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t n = ::read(from_, buf, sizeof buf);
        if (n > 0) rbuf_.append(buf, static_cast<size_t>(n));
        if (n == 0 || (n < 0 && errno != EINTR)) dead(type, case_name);
      }
    }
  }

  // The worker closed its stdout: collect its status and throw crashed / exited.
  [[noreturn]] void dead(const std::string& type, const std::string& case_name) const {
    int status = 0;
    const pid_t pid = pid_;
    reap(pid, status, 2.0);
    drain_stderr();
    close_fds();
    pid_ = -1;
    const std::string during = " during " + type + " of " + case_name;
    if (WIFSIGNALED(status))
      throw RunFailure("crashed",
                       name_or_label() + " crashed with " + signal_text(WTERMSIG(status)) + during + tail_text());
    throw RunFailure("exited", name_or_label() + " exited with status " + std::to_string(WEXITSTATUS(status)) + during +
                                   tail_text());
  }

  // Wait up to `grace` seconds for the child, then SIGKILL its process group.
  static void reap(pid_t pid, int& status, double grace) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace);
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        ::kill(-pid, SIGKILL), ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void stop(bool kill_now) const {
    if (pid_ <= 0) return;
    if (!kill_now && to_ >= 0) (void)!::write(to_, "{\"type\":\"bye\"}\n", 15);
    if (kill_now) ::kill(-pid_, SIGKILL), ::kill(pid_, SIGKILL);
    int status = 0;
    reap(pid_, status, kill_now ? 0.0 : 1.0);
    close_fds();
    pid_ = -1;
  }

  void close_fds() const {
    for (int* fd : {&to_, &from_, &err_})
      if (*fd >= 0) ::close(*fd), *fd = -1;
  }

  void drain_stderr() const {
    if (err_ < 0) return;
    char buf[4096];
    const int flags = ::fcntl(err_, F_GETFL);
    ::fcntl(err_, F_SETFL, flags | O_NONBLOCK);
    ssize_t n;
    while ((n = ::read(err_, buf, sizeof buf)) > 0) append_tail(buf, static_cast<size_t>(n));
  }

  void append_tail(const char* p, size_t n) const {
    tail_.append(p, n);
    if (tail_.size() > kStderrTail) tail_.erase(0, tail_.size() - kStderrTail);
  }
  std::string tail_text() const {
    std::string t = tail_;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    return t.empty() ? "; stderr empty" : "; stderr tail: " + t;
  }
  std::string name_or_label() const { return (name_.empty() ? "worker" : name_) + " (" + o_.label + ")"; }

  WorkerOptions o_;
  std::string name_;
  mutable std::mutex mu_;
  mutable std::string hello_name_, description_;
  mutable Capabilities caps_;
  mutable std::set<std::string> features_;
  mutable Support available_;
  mutable bool has_supports_ = false;
  mutable bool merge_ = false;            // the hello declared "merge": true (docs/worker-protocol.md 2c)
  mutable bool module_ = false;           // the hello declared "module": true (2d)
  mutable bool module_backward_ = false;  // and "module_backward": true
  mutable int protocol_ = 1;              // as the worker answered the hello
  mutable Declarations declarations_;
  mutable pid_t pid_ = -1;
  mutable int to_ = -1, from_ = -1, err_ = -1;
  mutable std::string rbuf_, tail_;
  mutable int64_t next_id_ = 0;
  mutable int shm_fd_ = -1;
  mutable std::string shm_path_;
  mutable unsigned char* shm_ = nullptr;
  mutable size_t shm_size_ = 0;
};

// The module entry of a worker: module messages to the same child, under the same isolation as its runs.
class WorkerModule final : public ModuleImpl {
 public:
  explicit WorkerModule(std::shared_ptr<const WorkerImpl> w) : w_(std::move(w)) {}
  std::string name() const override { return w_->name(); }
  Support supports(const ModuleProblem& m) const override { return w_->supports_module(m); }
  void run(const ModuleProblem& m, const ModuleInputs& in, ModuleOutputs& out) const override {
    w_->run_module(m, in, out);
  }
  Support supports_backward(const ModuleProblem& m) const override { return w_->supports_module(m, "module_backward"); }
  void run_backward(const ModuleProblem& m, const ModuleInputs& in, const Tensor& dy,
                    ModuleGradOutputs& g) const override {
    w_->run_module_backward(m, in, dy, g);
  }

 private:
  std::shared_ptr<const WorkerImpl> w_;
};

ModuleImplPtr WorkerImpl::module_entry() const {
  if (!module_) return nullptr;
  return std::make_shared<WorkerModule>(shared_from_this());
}

}  // namespace

ImplPtr start_worker(const WorkerOptions& o) { return std::make_shared<WorkerImpl>(o); }

}  // namespace attncheck
