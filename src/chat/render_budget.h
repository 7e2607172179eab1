// The sandbox's bounds on one render. A chat template is code from a checkpoint's repository: whatever it does,
// a render must end, in bounded time and memory, with an error naming the bound it passed. Values, operators
// and filters are computed far from the renderer, so the budget of the render running on a thread is reached
// through that thread (installed for the render's duration), not passed down every call.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "chat/template_error.h"

namespace probekit::chat {

/// How deep a template's text may nest expressions and blocks (the parser's bound, in levels of its grammar:
/// about three per parenthesis).
constexpr int kMaxTemplateNesting = 256;
/// How deep a value may nest lists and dicts (a message's JSON included).
constexpr int kMaxValueNesting = 256;

/// The bounds of one render. The defaults are far above what real templates use: rendering a 200-turn
/// conversation with tools through the Gemma 3, Qwen 3, Llama 3, DeepSeek V3 and gpt-oss templates takes at most
/// 2.2% of the steps, 2.4% of the bytes and 3.4% of the nesting (bench/chat_template_bench prints them).
struct RenderLimits {
  /// Units of work: expressions computed, statements run, loop iterations, items iterated, compared or printed.
  int64_t max_steps = 20'000'000;
  /// Bytes of text and list items made (output, concatenation, repetition, filters, tojson): bounds memory.
  int64_t max_bytes = int64_t{256} << 20;
  /// How deep expressions, blocks and macro calls may nest while rendering (macros calling themselves).
  int max_depth = 500;
  /// When set, the render stops with a RenderBudgetExceeded (timed_out) once this time has passed.
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

/// A render that passed one of its bounds; timed_out when it was the deadline.
class RenderBudgetExceeded : public TemplateError {
 public:
  RenderBudgetExceeded(const std::string& message, bool timed_out, int line = 0)
      : TemplateError(message, line), timed_out_(timed_out) {}
  bool timed_out() const { return timed_out_; }

 protected:
  std::exception_ptr at_line(int line) const override {
    return std::make_exception_ptr(RenderBudgetExceeded(message(), timed_out_, line));
  }

 private:
  bool timed_out_;
};

/// Installs `limits` as the budget of renders on this thread while it lives (renders nest: the inner one's
/// budget applies until it ends).
class RenderBudget {
 public:
  explicit RenderBudget(const RenderLimits& limits);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  int64_t steps() const { return steps_; }
  int64_t bytes() const { return bytes_; }
  int deepest() const { return deepest_; }

 private:
  friend void spend_steps(int64_t);
  friend void spend_bytes(int64_t);
  friend class RenderNesting;

  /// Past max_steps or at the next look at the clock: throws, or sets when to look next.
  void check_steps();
  [[noreturn]] void fail_bytes() const;
  [[noreturn]] void fail_depth() const;

  RenderLimits limits_;
  RenderBudget* previous_;
  int64_t steps_ = 0;
  int64_t next_check_ = 0;  // steps_ at which check_steps runs: max_steps, or earlier to read the clock
  int64_t bytes_ = 0;
  int depth_ = 0;
  int deepest_ = 0;
};

/// The budget of the render running on this thread (null outside renders). Values, operators and filters are
/// computed far from the renderer, so they reach it here; each counts its work in a few instructions.
inline thread_local RenderBudget* current_render_budget = nullptr;

/// Counts `count` units of work against this thread's render; past its bound (or its deadline), throws
/// RenderBudgetExceeded. Without a render running, does nothing.
inline void spend_steps(int64_t count = 1) {
  RenderBudget* budget = current_render_budget;
  if (budget == nullptr) return;
  budget->steps_ += count;
  if (budget->steps_ >= budget->next_check_) budget->check_steps();
}

/// Bytes of text scanned per step of work: an operation over a whole text (decoding it, searching it) counts its
/// length / kBytesPerStep steps, so that a step stays a bounded amount of work and the deadline is read in time.
constexpr int64_t kBytesPerStep = 64;

/// Counts the work of scanning `bytes` bytes of text (bytes / kBytesPerStep steps, at least one).
inline void spend_scan(size_t bytes) { spend_steps(1 + static_cast<int64_t>(bytes) / kBytesPerStep); }

/// Counts `count` bytes about to be made, before they are: past the bound, throws instead.
inline void spend_bytes(int64_t count) {
  RenderBudget* budget = current_render_budget;
  if (budget == nullptr) return;
  if (count > budget->limits_.max_bytes - budget->bytes_) budget->fail_bytes();
  budget->bytes_ += count;
}

/// One level of nesting while rendering (an expression inside another, a block, a macro call) for as long as
/// it lives, and one step of work; past a bound, its constructor throws.
class RenderNesting {
 public:
  RenderNesting() : budget_(current_render_budget) {
    if (budget_ == nullptr) return;
    if (++budget_->steps_ >= budget_->next_check_) budget_->check_steps();
    if (budget_->depth_ >= budget_->limits_.max_depth) budget_->fail_depth();
    if (++budget_->depth_ > budget_->deepest_) budget_->deepest_ = budget_->depth_;
  }
  ~RenderNesting() {
    if (budget_ != nullptr) budget_->depth_--;
  }
  RenderNesting(const RenderNesting&) = delete;
  RenderNesting& operator=(const RenderNesting&) = delete;

 private:
  RenderBudget* budget_;
};

}  // namespace probekit::chat
