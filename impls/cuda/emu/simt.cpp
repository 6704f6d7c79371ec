// The scheduler of the host SIMT emulation: one fiber per CUDA thread, resumed in a fixed order (forward or
// reversed) until each reaches a barrier; barriers release only when every participant arrived, and a step in
// which nothing can move is reported as a deadlock or a partial barrier, with the barrier's source location.
#include "simt.hpp"

#include <algorithm>
#include <atomic>
#include <boost/context/fiber.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "attncheck/threads.hpp"
#include "fiber_stack.hpp"

// AddressSanitizer keeps the bounds of the stack it believes is running; a fiber switch it is not told about makes
// it see an exception's unwinding (or any no-return call) on a fiber stack as a stack overflow. So, in ASan builds
// only, every switch in this file is announced (__sanitizer_start_switch_fiber before, _finish_ after, on the new
// stack). Other builds compile none of it.
#if defined(__SANITIZE_ADDRESS__)
#define ATTNCHECK_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNCHECK_EMU_ASAN 1
#endif
#endif
#ifdef ATTNCHECK_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace attncheck::emu {
namespace ctx = boost::context;

namespace {

using detail::PooledStack;

enum class State : uint8_t { runnable, at_block_barrier, at_warp_op, done };

struct Thread {
  ThreadIdentity id{};
  int linear = 0, warp = 0, lane = 0;
  State state = State::runnable;
  std::source_location where;
  // The pending warp collective and its result.
  WarpOp op = WarpOp::sync;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
  ctx::fiber fiber;  // this thread's suspended context
  ctx::fiber sink;   // the scheduler's context while this thread runs
#ifdef ATTNCHECK_EMU_ASAN
  const void* stack_bottom = nullptr;  // this fiber's stack, for ASan
  size_t stack_size = 0;
  void* fake_stack = nullptr;  // ASan's saved fake stack of this fiber while it is suspended
  bool started = false, skip = false;
#endif
};

struct Block {
  const std::function<void()>* body = nullptr;
  std::vector<std::unique_ptr<Thread>> threads;
  int warps = 0;
  std::exception_ptr error;
};

thread_local Thread* tl_thread = nullptr;
thread_local Block* tl_block = nullptr;
thread_local std::vector<unsigned char> tl_dynamic_shared;
thread_local const std::vector<GlobalBuffer>* tl_globals = nullptr;  // of the launch whose block runs here

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::sync: return "__syncwarp";
    case WarpOp::shfl_idx: return "__shfl_sync";
    case WarpOp::shfl_up: return "__shfl_up_sync";
    case WarpOp::shfl_down: return "__shfl_down_sync";
    case WarpOp::shfl_xor: return "__shfl_xor_sync";
    case WarpOp::ballot: return "__ballot_sync";
  }
  return "?";
}

std::string where_str(const std::source_location& w) {
  std::string f = w.file_name();
  if (const size_t s = f.rfind('/'); s != std::string::npos) f = f.substr(s + 1);
  return f + ":" + std::to_string(w.line());
}

std::string block_str(const ThreadIdentity& id) {
  std::ostringstream o;
  o << "block (" << id.block_idx.x << "," << id.block_idx.y << "," << id.block_idx.z << ")";
  return o.str();
}

std::string hex(unsigned m) {
  std::ostringstream o;
  o << "0x" << std::hex << m;
  return o.str();
}

#ifdef ATTNCHECK_EMU_ASAN
// The stack of the scheduler (the OS thread's own), learnt from the first switch into a fiber, and its saved fake
// stack while a fiber runs.
thread_local const void* tl_sched_bottom = nullptr;
thread_local size_t tl_sched_size = 0;
thread_local void* tl_sched_fake = nullptr;

// Scheduler -> fiber `t` (a resume, or a destruction, which resumes it to unwind it), and back on the scheduler.
void to_fiber(Thread& t) { __sanitizer_start_switch_fiber(&tl_sched_fake, t.stack_bottom, t.stack_size); }
void back_on_scheduler() { __sanitizer_finish_switch_fiber(tl_sched_fake, nullptr, nullptr); }
// On fiber `t`: arrived from the scheduler (recording its bounds), and leaving for it; `exiting` when the fiber
// will not run again (ASan drops its fake stack).
void on_fiber(Thread& t) {
  __sanitizer_finish_switch_fiber(t.fake_stack, &tl_sched_bottom, &tl_sched_size);
  t.started = true;
}
void to_scheduler(Thread& t, bool exiting) {
  __sanitizer_start_switch_fiber(exiting ? nullptr : &t.fake_stack, tl_sched_bottom, tl_sched_size);
}

// The pooled stack, recording where it is for the announcements.
struct FiberStack : detail::PooledStack {
  Thread* t;
  ctx::stack_context allocate() {
    ctx::stack_context sc = PooledStack::allocate();
    t->stack_bottom = static_cast<char*>(sc.sp) - sc.size;
    t->stack_size = sc.size;
    return sc;
  }
};

// Fibers left suspended when a block ends early (an error) are ended here, announced: destroying one resumes it
// to unwind its stack, a switch the Block's destructor would make without telling ASan. One that never ran is
// not destroyed (its unwinding would start inside Boost, before it could announce its arrival) but run with
// `skip`, so it returns without running the kernel.
void end_suspended(Block& blk) {
  for (auto& t : blk.threads) {
    if (!t->fiber) continue;
    to_fiber(*t);
    if (t->started) {
      t->fiber = ctx::fiber{};
    } else {
      t->skip = true;
      t->fiber = std::move(t->fiber).resume();
    }
    back_on_scheduler();
  }
}
bool skipped(const Thread& t) { return t.skip; }
#else
void to_fiber(Thread&) {}
void back_on_scheduler() {}
void on_fiber(Thread&) {}
void to_scheduler(Thread&, bool) {}
struct FiberStack : detail::PooledStack {
  Thread* t;
};
void end_suspended(Block&) {}
constexpr bool skipped(const Thread&) { return false; }
#endif

// Give control back to the scheduler; returns when the scheduler resumes this thread, or throws Boost's
// forced_unwind when the scheduler destroys the suspended fiber.
void yield_to_scheduler(Thread& t) {
  to_scheduler(t, false);
  try {
    t.sink = std::move(t.sink).resume();
  } catch (const ctx::detail::forced_unwind&) {
    on_fiber(t);
    throw;
  }
  on_fiber(t);
}

// Source lane of a shuffle for `lane`, or -1 when the lane keeps its own value (CUDA's out-of-segment rule).
int shuffle_source(const Thread& t) {
  const int seg = t.lane & ~(t.width - 1);
  switch (t.op) {
    case WarpOp::shfl_idx: return seg + (t.arg & (t.width - 1));
    case WarpOp::shfl_up: {
      const int s = t.lane - t.arg;
      return s < seg ? -1 : s;
    }
    case WarpOp::shfl_down: {
      const int s = t.lane + t.arg;
      return s >= seg + t.width ? -1 : s;
    }
    case WarpOp::shfl_xor: {
      const int s = t.lane ^ t.arg;
      return s >= seg + t.width ? -1 : s;
    }
    default: return -1;
  }
}

// Complete every warp collective whose participants have all arrived. Returns whether any completed.
bool complete_warp_ops(Block& blk) {
  bool any = false;
  const int n = static_cast<int>(blk.threads.size());
  for (int w = 0; w < blk.warps; ++w) {
    Thread* lanes[32] = {};
    for (int l = 0; l < 32 && w * 32 + l < n; ++l) lanes[l] = blk.threads[static_cast<size_t>(w * 32 + l)].get();
    for (int l = 0; l < 32; ++l) {
      Thread* t = lanes[l];
      if (!t || t->state != State::at_warp_op) continue;
      const unsigned mask = t->mask;
      bool ready = true;
      for (int o = 0; o < 32 && ready; ++o) {
        if (!(mask >> o & 1u)) continue;
        const Thread* u = lanes[o];
        if (!u) {
          throw EmulationError(std::string(op_name(t->op)) + " at " + where_str(t->where) + " in " + block_str(t->id) +
                               ": mask " + hex(mask) + " names lane " + std::to_string(o) + " of warp " +
                               std::to_string(w) + ", which does not exist (blockDim too small)");
        }
        ready = u->state == State::at_warp_op && u->mask == mask;
      }
      if (!ready) continue;
      // Everyone in the mask is here: they must be at the same collective.
      for (int o = 0; o < 32; ++o) {
        if (!(mask >> o & 1u)) continue;
        const Thread* u = lanes[o];
        const bool same_site =
            t->op == WarpOp::sync ||
            (u->where.line() == t->where.line() && (u->where.file_name() == t->where.file_name() ||
                                                    std::strcmp(u->where.file_name(), t->where.file_name()) == 0));
        if (u->op != t->op || u->width != t->width || !same_site)
          throw EmulationError("mismatched warp collectives in " + block_str(t->id) + " warp " + std::to_string(w) +
                               ": lane " + std::to_string(l) + " in " + op_name(t->op) + " at " + where_str(t->where) +
                               ", lane " + std::to_string(o) + " in " + op_name(u->op) + " at " + where_str(u->where));
      }
      uint64_t ballot = 0;
      for (int o = 0; o < 32; ++o)
        if ((mask >> o & 1u) && lanes[o]->value) ballot |= 1ull << o;
      for (int o = 0; o < 32; ++o) {
        if (!(mask >> o & 1u)) continue;
        Thread* u = lanes[o];
        if (u->op == WarpOp::ballot) {
          u->result = ballot;
        } else if (u->op != WarpOp::sync) {
          const int src = shuffle_source(*u);
          if (src < 0) {
            u->result = u->value;
          } else if (!(mask >> src & 1u)) {
            throw EmulationError(std::string(op_name(u->op)) + " at " + where_str(u->where) + " in " +
                                 block_str(u->id) + " warp " + std::to_string(w) + ": lane " + std::to_string(o) +
                                 " reads lane " + std::to_string(src) + ", which is not in mask " + hex(mask) +
                                 " (undefined on the device)");
          } else {
            u->result = lanes[src]->value;
          }
        }
      }
      for (int o = 0; o < 32; ++o)
        if (mask >> o & 1u) lanes[o]->state = State::runnable;
      any = true;
    }
  }
  return any;
}

// Nothing can move: describe who waits where, as a deadlock or a barrier reached by only part of the block.
[[noreturn]] void report_stuck(const Block& blk) {
  std::map<std::string, int> groups;
  int at_bar = 0, done = 0, n = static_cast<int>(blk.threads.size());
  for (const auto& t : blk.threads) {
    std::string key;
    if (t->state == State::done) {
      key = "exited";
      ++done;
    } else if (t->state == State::at_block_barrier) {
      key = "in __syncthreads at " + where_str(t->where);
      ++at_bar;
    } else {
      key = std::string("in ") + op_name(t->op) + " (mask " + hex(t->mask) + ") at " + where_str(t->where) + " [warp " +
            std::to_string(t->warp) + "]";
    }
    ++groups[key];
  }
  std::ostringstream o;
  o << block_str(blk.threads.front()->id) << ": ";
  if (at_bar > 0 && at_bar + done == n)
    o << "__syncthreads reached by only part of the block (" << at_bar << " of " << n << " threads; " << done
      << " exited without reaching it)";
  else
    o << "deadlock: no thread can proceed";
  o << " —";
  for (const auto& [key, count] : groups)
    o << ' ' << count << " thread" << (count == 1 ? "" : "s") << ' ' << key << ';';
  throw EmulationError(o.str());
}

void run_block(const LaunchConfig& cfg, const std::function<void()>& body, uint3 block_idx) {
  Block blk;
  blk.body = &body;
  const int nx = static_cast<int>(cfg.block.x), ny = static_cast<int>(cfg.block.y), nz = static_cast<int>(cfg.block.z);
  const int n = nx * ny * nz;
  blk.warps = (n + 31) / 32;
  blk.threads.reserve(static_cast<size_t>(n));
  for (int linear = 0; linear < n; ++linear) {
    auto t = std::make_unique<Thread>();
    t->linear = linear;
    t->warp = linear / 32;
    t->lane = linear % 32;
    t->id.thread_idx = uint3{static_cast<unsigned>(linear % nx), static_cast<unsigned>((linear / nx) % ny),
                             static_cast<unsigned>(linear / (nx * ny))};
    t->id.block_idx = block_idx;
    t->id.block_dim = cfg.block;
    t->id.grid_dim = cfg.grid;
    Thread* self = t.get();
    Block* b = &blk;
    t->fiber = ctx::fiber(std::allocator_arg, FiberStack{{}, self}, [self, b](ctx::fiber&& sink) {
      on_fiber(*self);
      self->sink = std::move(sink);
      try {
        if (!skipped(*self)) (*b->body)();
      } catch (const ctx::detail::forced_unwind&) {
        to_scheduler(*self, true);
        throw;  // the fiber is being destroyed: let boost unwind it
      } catch (...) {
        if (!b->error) b->error = std::current_exception();
      }
      self->state = State::done;
      to_scheduler(*self, true);
      return std::move(self->sink);
    });
    blk.threads.push_back(std::move(t));
  }
  // Fresh, poisoned dynamic shared memory: reading it before writing it gives NaN, not an earlier block's data.
  tl_dynamic_shared.assign(std::max<size_t>(cfg.dynamic_smem, 16), 0xff);

  tl_block = &blk;
  tl_globals = cfg.globals.empty() ? nullptr : &cfg.globals;
  struct Reset {
    Block& blk;
    ~Reset() {
      end_suspended(blk);
      tl_thread = nullptr;
      tl_block = nullptr;
      tl_globals = nullptr;
    }
  } reset{blk};
  for (;;) {
    for (int k = 0; k < n; ++k) {
      Thread& t = *blk.threads[static_cast<size_t>(cfg.order == Order::forward ? k : n - 1 - k)];
      if (t.state != State::runnable) continue;
      tl_thread = &t;
      to_fiber(t);
      t.fiber = std::move(t.fiber).resume();
      back_on_scheduler();
      tl_thread = nullptr;
      if (blk.error) std::rethrow_exception(blk.error);  // remaining fibers are unwound by their destructors
    }
    if (std::all_of(blk.threads.begin(), blk.threads.end(), [](const auto& t) { return t->state == State::done; }))
      return;
    if (complete_warp_ops(blk)) continue;
    const bool all_at_bar = std::all_of(blk.threads.begin(), blk.threads.end(),
                                        [](const auto& t) { return t->state == State::at_block_barrier; });
    if (!all_at_bar) report_stuck(blk);
    const Thread& first = *blk.threads.front();
    for (const auto& t : blk.threads)
      if (t->where.line() != first.where.line() || std::strcmp(t->where.file_name(), first.where.file_name()) != 0)
        throw EmulationError(block_str(first.id) + ": threads wait at different __syncthreads: thread " +
                             std::to_string(first.linear) + " at " + where_str(first.where) + ", thread " +
                             std::to_string(t->linear) + " at " + where_str(t->where) + " (divergent barrier)");
    for (const auto& t : blk.threads) t->state = State::runnable;
  }
}

void check_launch(const LaunchConfig& cfg) {
  auto bad = [&](const std::string& what) { throw EmulationError("invalid launch configuration: " + what); };
  const uint64_t threads = uint64_t{cfg.block.x} * cfg.block.y * cfg.block.z;
  if (threads == 0 || threads > 1024)
    bad("block (" + std::to_string(cfg.block.x) + "," + std::to_string(cfg.block.y) + "," +
        std::to_string(cfg.block.z) + ") has " + std::to_string(threads) + " threads, expected 1..1024");
  if (cfg.block.z > 64) bad("blockDim.z = " + std::to_string(cfg.block.z) + " > 64");
  if (cfg.grid.x == 0 || cfg.grid.y == 0 || cfg.grid.z == 0 || cfg.grid.x > 2147483647u || cfg.grid.y > 65535 ||
      cfg.grid.z > 65535)
    bad("grid (" + std::to_string(cfg.grid.x) + "," + std::to_string(cfg.grid.y) + "," + std::to_string(cfg.grid.z) +
        ") outside 1..2^31-1 x 1..65535 x 1..65535");
  if (cfg.dynamic_smem > cfg.smem_limit)
    bad("dynamic shared memory " + std::to_string(cfg.dynamic_smem) + " bytes > limit " +
        std::to_string(cfg.smem_limit));
}

}  // namespace

const ThreadIdentity& identity() {
  if (!tl_thread) throw EmulationError("threadIdx/blockIdx used outside an emulated kernel");
  return tl_thread->id;
}

unsigned char* dynamic_shared() {
  if (!tl_thread) throw EmulationError("dynamic shared memory used outside an emulated kernel");
  return tl_dynamic_shared.data();
}

namespace {
std::string thread_str(const ThreadIdentity& id) {
  std::ostringstream o;
  o << "thread (" << id.thread_idx.x << "," << id.thread_idx.y << "," << id.thread_idx.z << ") of " << block_str(id);
  return o.str();
}

bool holds(const GlobalBuffer& g, uintptr_t addr, bool inclusive_end) {
  const auto b = reinterpret_cast<uintptr_t>(g.base);
  return addr >= b && (inclusive_end ? addr <= b + g.bytes : addr < b + g.bytes);
}

// "k[element 272: 16 elements past the end of its 256]" for an access at `addr` near or inside `g`.
std::string locate(const GlobalBuffer& g, intptr_t addr, size_t elem) {
  const auto b = static_cast<intptr_t>(reinterpret_cast<uintptr_t>(g.base));
  const auto e = static_cast<intptr_t>(elem);
  const intptr_t rel = addr - b;
  const intptr_t n = static_cast<intptr_t>(g.bytes) / e;
  const intptr_t idx = rel >= 0 ? rel / e : -((-rel + e - 1) / e);
  std::ostringstream o;
  o << g.name << "[element " << idx;
  if (idx < 0)
    o << ": " << -idx << " element" << (idx == -1 ? "" : "s") << " before its start";
  else if (rel + e > static_cast<intptr_t>(g.bytes))
    o << ": " << idx - n + 1 << " element" << (idx - n + 1 == 1 ? "" : "s") << " past the end of its " << n;
  else
    o << " of " << n;
  o << "]";
  if (rel % e != 0) o << " (byte offset " << rel << ", misaligned)";
  return o.str();
}
}  // namespace

void check_global(const void* base, int64_t index, size_t elem_bytes, bool store) {
  const std::vector<GlobalBuffer>* globals = tl_globals;
  if (!globals || !tl_thread) return;
  const auto b = reinterpret_cast<uintptr_t>(base);
  const uintptr_t addr = b + static_cast<uintptr_t>(index) * elem_bytes;  // wraps like the device's address math
  auto fail = [&](const std::string& where) {
    throw OutOfBounds(std::string("out-of-bounds global ") + (store ? "store to " : "load from ") + where + " by " +
                      thread_str(tl_thread->id));
  };
  // The buffer the kernel means: the one `base` points into (strictly inside first, then one past its end).
  const GlobalBuffer* owner = nullptr;
  for (const GlobalBuffer& g : *globals)
    if (holds(g, b, false)) owner = &g;
  if (!owner)
    for (const GlobalBuffer& g : *globals)
      if (holds(g, b, true)) owner = &g;
  if (owner) {
    if (holds(*owner, addr, false) && holds(*owner, addr + elem_bytes, true)) return;
    fail(locate(*owner, static_cast<intptr_t>(addr), elem_bytes));
  }
  const GlobalBuffer* near = nullptr;
  uintptr_t best = 4096 + 1;
  for (const GlobalBuffer& g : *globals) {
    if (holds(g, addr, false) && holds(g, addr + elem_bytes, true)) return;
    const auto gb = reinterpret_cast<uintptr_t>(g.base);
    const uintptr_t d = addr < gb ? gb - addr : addr < gb + g.bytes ? 0 : addr - (gb + g.bytes);
    if (d < best) best = d, near = &g;
  }
  if (near) fail(locate(*near, static_cast<intptr_t>(addr), elem_bytes));
  std::ostringstream o;
  o << "an address in no registered buffer (0x" << std::hex << addr << ")";
  fail(o.str());
}

void block_barrier(const std::source_location& where) {
  Thread* t = tl_thread;
  if (!t) throw EmulationError("__syncthreads called outside an emulated kernel");
  t->state = State::at_block_barrier;
  t->where = where;
  yield_to_scheduler(*t);
}

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width,
                         const std::source_location& where) {
  Thread* t = tl_thread;
  if (!t) throw EmulationError(std::string(op_name(op)) + " called outside an emulated kernel");
  if (width <= 0 || width > 32 || (width & (width - 1)))
    throw EmulationError(std::string(op_name(op)) + " at " + where_str(where) + ": width " + std::to_string(width) +
                         " is not a power of two in 1..32");
  if (!(mask >> t->lane & 1u))
    throw EmulationError(std::string(op_name(op)) + " at " + where_str(where) + ": calling lane " +
                         std::to_string(t->lane) + " is not in mask " + hex(mask));
  t->state = State::at_warp_op;
  t->op = op;
  t->mask = mask;
  t->value = value;
  t->arg = arg;
  t->width = width;
  t->where = where;
  yield_to_scheduler(*t);
  return t->result;
}

void launch_body(const LaunchConfig& cfg, const std::function<void()>& body) {
  check_launch(cfg);
  if (tl_thread) throw EmulationError("kernel launched from inside an emulated kernel (dynamic parallelism)");
  const int64_t nblocks = int64_t{cfg.grid.x} * cfg.grid.y * cfg.grid.z;
  // Blocks are independent on the device; they are taken from a shared counter in the configured order, on OS
  // threads started for this launch (never the caller's): static __shared__ storage is thread_local, so every
  // launch starts with it zeroed instead of holding an earlier launch's data, which could hide a race.
  int nthreads = cfg.os_threads > 0 ? cfg.os_threads : default_threads();
  nthreads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(nthreads, nblocks)));
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  // Blocks are claimed from the counter, so a pool the OS made smaller still runs every block.
  run_on_threads(
      nthreads,
      [&](int) {
        for (int64_t k; !failed && (k = next.fetch_add(1)) < nblocks;) {
          const int64_t lin = cfg.order == Order::forward ? k : nblocks - 1 - k;
          const uint3 idx{static_cast<unsigned>(lin % cfg.grid.x),
                          static_cast<unsigned>((lin / cfg.grid.x) % cfg.grid.y),
                          static_cast<unsigned>(lin / (int64_t{cfg.grid.x} * cfg.grid.y))};
          try {
            run_block(cfg, body, idx);
          } catch (...) {
            failed = true;
            throw;
          }
        }
      },
      Shortfall::fewer);
}

std::vector<unsigned char> run_both_orders(const std::function<std::vector<unsigned char>(Order)>& run,
                                           const std::string& what) {
  std::vector<unsigned char> fwd = run(Order::forward);
  const std::vector<unsigned char> rev = run(Order::reversed);
  if (fwd.size() != rev.size())
    throw EmulationError("race: " + what + ": forward run wrote " + std::to_string(fwd.size()) +
                         " bytes, reversed run " + std::to_string(rev.size()));
  for (size_t n = 0; n < fwd.size(); ++n)
    if (fwd[n] != rev[n])
      throw EmulationError("race: " + what + ": forward and reversed thread orders disagree at byte " +
                           std::to_string(n) + " (" + std::to_string(fwd[n]) + " vs " + std::to_string(rev[n]) + ")");
  return fwd;
}

}  // namespace attncheck::emu
