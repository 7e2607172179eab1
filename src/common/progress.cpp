#include "common/progress.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <mutex>

#include "common/interrupt.h"
#include "common/logging.h"
#include "common/units.h"

namespace probekit {

namespace {
constexpr double kTerminalRedrawSeconds = 0.1;
constexpr double kLogLineSeconds = 10.0;
constexpr int kBarWidth = 30;

std::mutex listener_mutex;
std::shared_ptr<const ProgressListener> current_listener;

std::shared_ptr<const ProgressListener> listener_now() {
  std::lock_guard<std::mutex> lock(listener_mutex);
  return current_listener;
}
}  // namespace

void set_progress_listener(ProgressListener listener) {
  std::lock_guard<std::mutex> lock(listener_mutex);
  current_listener = listener ? std::make_shared<const ProgressListener>(std::move(listener)) : nullptr;
}

std::string format_duration(double seconds) {
  if (seconds < 0 || seconds > 1e7) return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit)
    : listener_(listener_now()), label_(std::move(label)), unit_(std::move(unit)), total_(total),
      terminal_(stderr_is_terminal()), enabled_(spdlog::should_log(spdlog::level::info)),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {
  if (listener_) report(false);  // a listener's bar starts with the work, so its rate counts from here
}

ProgressBar::~ProgressBar() {
  // A bar abandoned by an exception leaves the cursor at the start of a fresh line for the error message.
  if (enabled_ && terminal_ && !finished_ && !listener_) std::fputc('\n', stderr);
}

double ProgressBar::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::update(int64_t done, const std::string& extra) {
  throw_if_interrupted();
  done_ = done;
  extra_ = extra;
  if (listener_) return report(false);
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since >= (terminal_ ? kTerminalRedrawSeconds : kLogLineSeconds)) {
    last_draw_ = now;
    draw(false);
  }
}

void ProgressBar::finish(const std::string& extra) {
  if (finished_) return;
  if (!extra.empty()) extra_ = extra;
  finished_ = true;
  if (listener_) return report(true);
  draw(true);
}

void ProgressBar::report(bool finished) const { (*listener_)(ProgressReport{label_, unit_, done_, total_, finished}); }

void ProgressBar::draw(bool final_draw) {
  if (!enabled_) return;
  double elapsed = elapsed_seconds();
  double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  std::string counts = total_ > 0 ? fmt::format("{}/{} {}", done_, total_, unit_) : fmt::format("{} {}", done_, unit_);
  std::string speed = fmt::format("{:.1f} {}/s", rate, unit_);
  if (unit_ == "bytes") {
    counts = format_byte_size(static_cast<double>(done_)) +
             (total_ > 0 ? "/" + format_byte_size(static_cast<double>(total_)) : std::string());
    speed = format_byte_size(rate) + "/s";
  }
  std::string eta;
  if (total_ > 0 && rate > 0 && !final_draw) eta = " ETA " + format_duration(static_cast<double>(total_ - done_) / rate);
  std::string tail = fmt::format("{} {} {}{}{}", counts, speed, format_duration(elapsed), eta,
                                 extra_.empty() ? "" : "  " + extra_);
  if (terminal_) {
    std::string bar;
    if (total_ > 0) {
      double fraction = std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
      int filled = static_cast<int>(fraction * kBarWidth);
      bar = fmt::format("[{}{}] {:3.0f}% ", std::string(filled, '='), std::string(kBarWidth - filled, ' '),
                        fraction * 100);
    }
    std::fprintf(stderr, "\r\033[K%s %s%s%s", label_.c_str(), bar.c_str(), tail.c_str(), final_draw ? "\n" : "");
    std::fflush(stderr);
  } else {
    spdlog::info("{}: {}", label_, tail);
  }
}

}  // namespace probekit
