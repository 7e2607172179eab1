// Progress for long work: a bar redrawn in place on a terminal, a plain log line every few seconds otherwise
// (so logs from batch jobs stay readable), nothing with --quiet; or, while a listener is set (the Python package's
// bars), every update handed to it instead. Each update is also where long work stops when an interruption was
// requested (common/interrupt.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace probekit {

/// A bar's state as a listener receives it.
struct ProgressReport {
  std::string label, unit;
  int64_t done = 0, total = 0;  // total 0: unknown
  bool finished = false;
};
/// Called with every update of every bar, on the thread that updates it.
using ProgressListener = std::function<void(const ProgressReport&)>;

/// Hands the updates of bars started from now on to `listener` instead of drawing them; an empty one draws again.
void set_progress_listener(ProgressListener listener);

class ProgressBar {
 public:
  /// `unit` names what is counted ("examples", "epochs"); total 0 means unknown. With the unit "bytes" counts
  /// and rates are shown as sizes (kB, MB, GB).
  ProgressBar(std::string label, int64_t total, std::string unit);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// Sets the count done so far and an optional extra text (rates, metrics) shown after the bar; throws Interrupted
  /// when an interruption was requested.
  void update(int64_t done, const std::string& extra = "");
  /// Draws the final state and ends the line.
  void finish(const std::string& extra = "");
  double elapsed_seconds() const;

 private:
  void draw(bool final_draw);
  void report(bool finished) const;

  std::shared_ptr<const ProgressListener> listener_;
  std::string label_, unit_, extra_;
  int64_t total_ = 0, done_ = 0;
  bool terminal_ = false, enabled_ = true, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

/// Formats seconds as H:MM:SS or M:SS.
std::string format_duration(double seconds);

}  // namespace probekit
