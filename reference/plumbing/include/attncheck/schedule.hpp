// How an implementation is asked to schedule one run: the knobs a kernel exposes (worker threads, key splits, the
// order of its work units) that must not change its result beyond what it promises (docs/invariance.md#schedule).
// The harness sets a schedule around a run (ScheduleScope); an implementation that honours a knob reads it
// (default_threads() does for the threads; plugins get it as an ABI extension, workers in the run request).
#pragma once

#include <string>

namespace attncheck {
inline namespace plumbing {

// Knobs, as bits (the plugin ABI's attncheck_declarations.schedule_knobs uses the same values).
enum ScheduleKnob : unsigned { knob_threads = 1u, knob_num_splits = 2u, knob_block_order = 4u };
inline constexpr unsigned kAllKnobs = knob_threads | knob_num_splits | knob_block_order;
// "threads", "num_splits", "block_order" (one knob); knob_from_string throws std::invalid_argument naming the value.
const char* knob_name(ScheduleKnob k);
ScheduleKnob knob_from_string(const std::string& s);
// "threads, num_splits" (the knobs set in a mask), "none" for 0.
std::string knob_list(unsigned knobs);

struct Schedule {
  int threads = 0;        // worker threads; 0 = the implementation's own choice
  int num_splits = 0;     // key splits per row (split-KV); 0 = its own choice
  bool reversed = false;  // its work units (query blocks, heads) taken in reverse order
  bool is_default() const { return threads == 0 && num_splits == 0 && !reversed; }
  std::string describe() const;  // "threads=3", "num_splits=2", "block_order=reversed"
};

// The schedule of runs on the calling thread (the default outside a ScheduleScope).
const Schedule& current_schedule();

class ScheduleScope {
 public:
  explicit ScheduleScope(const Schedule& s);
  ~ScheduleScope();
  ScheduleScope(const ScheduleScope&) = delete;
  ScheduleScope& operator=(const ScheduleScope&) = delete;

 private:
  Schedule saved_;
};

}  // namespace plumbing
}  // namespace attncheck
