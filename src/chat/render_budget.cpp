#include "chat/render_budget.h"

#include <fmt/format.h>

#include <algorithm>

namespace probekit::chat {

namespace {

// Reading the clock costs more than a step: it is read once per this many steps.
constexpr int64_t kStepsPerClockCheck = 4096;

std::string size_text(int64_t bytes) {
  return bytes % (1 << 20) == 0 ? fmt::format("{} MiB", bytes >> 20) : fmt::format("{} bytes", bytes);
}

}  // namespace

RenderBudget::RenderBudget(const RenderLimits& limits)
    : limits_(limits), previous_(current_render_budget), next_check_(limits.deadline ? 0 : limits.max_steps + 1) {
  current_render_budget = this;
}

RenderBudget::~RenderBudget() { current_render_budget = previous_; }

void RenderBudget::check_steps() {
  if (steps_ > limits_.max_steps) {
    throw RenderBudgetExceeded(
        fmt::format("the render passed its budget of {} steps (a loop or a recursion without end?)", limits_.max_steps),
        false);
  }
  next_check_ = limits_.max_steps + 1;
  if (!limits_.deadline) return;
  if (std::chrono::steady_clock::now() > *limits_.deadline) {
    throw RenderBudgetExceeded(fmt::format("the render ran out of time after {} steps", steps_), true);
  }
  next_check_ = std::min(next_check_, steps_ + kStepsPerClockCheck);
}

void RenderBudget::fail_bytes() const {
  throw RenderBudgetExceeded("the render passed its budget of " + size_text(limits_.max_bytes) + " of text and lists", false);
}

void RenderBudget::fail_depth() const {
  throw RenderBudgetExceeded(fmt::format("the render nests expressions, blocks and macro calls deeper than {} levels (a "
                                         "macro calling itself without end?)", limits_.max_depth),
                             false);
}

}  // namespace probekit::chat
