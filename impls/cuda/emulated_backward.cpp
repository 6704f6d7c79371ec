// The CUDA backward kernels on the host SIMT emulation: every global access is bounds-checked against the
// registered buffers, every buffer they write also sits in a copy framed by guard bands (a changed guard byte is an
// out-of-bounds write), and `cuda-emulated` runs them in both thread orders, compared bit for bit (races).
#include <cstring>
#include <functional>

#include "attncheck/run_failure.hpp"
#include "emulated.hpp"
#include "host_plan_backward.hpp"

namespace attncheck::cuda {

namespace {
// Buffers moved into framed copies for the duration of a launch sequence.
class GuardBands {
 public:
  template <class P>
  void add(P*& ptr, size_t bytes, const char* name) {
    if (!ptr) return;
    P* const original = ptr;
    Band b;
    b.original = original;
    b.bytes = bytes;
    b.name = name;
    b.framed.assign(bytes + 2 * kGuardBytes, 0xFF);
    std::memcpy(b.framed.data() + kGuardBytes, original, bytes);
    ptr = reinterpret_cast<P*>(b.framed.data() + kGuardBytes);
    b.restore = [&ptr, original] { ptr = original; };
    bands_.push_back(std::move(b));
  }
  // Puts the original pointers back, copies the results into them; throws RunFailure("out-of-bounds") naming the
  // buffer and the byte offset of the first changed guard byte.
  void check_and_restore() {
    for (Band& b : bands_) {
      b.restore();
      const unsigned char* f = b.framed.data();
      for (size_t n = 0; n < b.framed.size(); ++n) {
        if (n == kGuardBytes) n += b.bytes;
        if (n >= b.framed.size() || f[n] == 0xFF) continue;
        const bool before = n < kGuardBytes;
        throw RunFailure("out-of-bounds",
                         std::string("emulated backward kernel wrote outside '") + b.name + "': guard byte " +
                             std::to_string(before ? kGuardBytes - n : n - kGuardBytes - b.bytes) +
                             (before ? " before its start" : " past its end") + " (byte offset " +
                             std::to_string(static_cast<int64_t>(n) - static_cast<int64_t>(kGuardBytes)) + ")");
      }
      std::memcpy(b.original, f + kGuardBytes, b.bytes);
    }
  }

 private:
  struct Band {
    void* original = nullptr;
    size_t bytes = 0;
    const char* name = "";
    std::vector<unsigned char> framed;
    std::function<void()> restore;
  };
  std::vector<Band> bands_;
};

}  // namespace

void run_backward_emulated(const Problem& p, const Inputs& in, const Outputs& fwd, const Tensor& dout, Gradients& g,
                           emu::Order order) {
  BwdPlan plan = make_backward_plan(p, in, fwd, dout, g);
  BwdParams& bp = plan.params;
  GuardBands guard;
  guard.add(bp.dq, g.dq.bytes.size(), "dq");
  guard.add(bp.dk, g.dk.bytes.size(), "dk");
  guard.add(bp.dv, g.dv.bytes.size(), "dv");
  guard.add(bp.d, plan.d.size(), "D workspace");
  guard.add(bp.live, plan.live.size(), "live workspace");
  guard.add(bp.ds, plan.ds.size(), "dS workspace");
  guard.add(bp.dbias, plan.dbias.size(), "dbias workspace");
  // Every buffer the kernels may touch is registered for the bounds check of each global access.
  const HostPlan& hp = plan.inputs;
  const AttnParams& a = bp.a;
  std::vector<emu::GlobalBuffer> globals = {{"q", a.q, hp.q_bytes},
                                            {"k", a.k, hp.k_bytes},
                                            {"v", a.v, hp.v_bytes},
                                            {"out (forward)", a.out, fwd.out.bytes.size()},
                                            {"lse (forward)", a.lse, fwd.lse->bytes.size()},
                                            {"dout", bp.dout, dout.bytes.size()},
                                            {"dq", bp.dq, g.dq.bytes.size()},
                                            {"dk", bp.dk, g.dk.bytes.size()},
                                            {"dv", bp.dv, g.dv.bytes.size()},
                                            {"D workspace", bp.d, plan.d.size()},
                                            {"live workspace", bp.live, plan.live.size()},
                                            {"diag_offset", a.diag_offset, hp.diag_offset.size() * sizeof(int64_t)},
                                            {"key_length", a.key_length, hp.key_length.size() * sizeof(int64_t)}};
  if (a.mask) globals.push_back({"mask", a.mask, hp.mask_bytes});
  if (a.bias) globals.push_back({"bias", a.bias, hp.bias_bytes()});
  if (a.keep) globals.push_back({"keep", a.keep, hp.keep_bytes});
  if (bp.ds) globals.push_back({"dS workspace", bp.ds, plan.ds.size()});
  if (bp.dbias) globals.push_back({"dbias workspace", bp.dbias, plan.dbias.size()});
  for (const BwdLaunch& k : plan_backward(bp, hp.elem)) {
    emu::LaunchConfig cfg;
    cfg.grid = k.grid;
    cfg.block = k.block;
    cfg.dynamic_smem = k.smem;
    cfg.order = order;
    cfg.globals = globals;
    try {
      emu::launch(cfg, k.fn, bp);
    } catch (const emu::OutOfBounds& e) {
      throw RunFailure("out-of-bounds", std::string("emulated ") + k.name + " kernel: " + e.what());
    }
  }
  guard.check_and_restore();
  store_dbias(plan, g);
}

}  // namespace attncheck::cuda
