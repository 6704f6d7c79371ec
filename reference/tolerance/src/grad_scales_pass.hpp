// The GradObserver that fills a GradScales from the reference backward's rows (grad_scales.cpp).
#pragma once

#include "attncheck/grad_scales.hpp"
#include "attncheck/grad_trace.hpp"

namespace attncheck {
inline namespace tolerance {

// Allocates the scales for the problem the loops run; every call adds the terms of one row, in the loops' order,
// so the sums are the same for any thread count.
class GradScalesPass final : public GradObserver {
 public:
  explicit GradScalesPass(GradScales& s) : s_(s) {}
  void start(const GradLoops& lp) override;
  void row(const GradRowTrace& t) override;
  void staged(const BackwardResult& r) override;
  void bias_row(int64_t bias_row, const GradRowTrace& t) override;

 private:
  GradScales& s_;
  const GradLoops* lp_ = nullptr;
  std::vector<double> qa_, ka_;  // with RoPE: per staged q and k element, a_f |x_f| (grad_scales.cpp)
};

}  // namespace tolerance
}  // namespace attncheck
