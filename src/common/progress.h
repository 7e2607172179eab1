// Progress for long work: a bar redrawn in place on a terminal, a plain log line every few seconds otherwise
// (so logs from batch jobs stay readable), nothing with --quiet.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace probekit {

class ProgressBar {
 public:
  /// `unit` names what is counted ("examples", "epochs"); total 0 means unknown. With the unit "bytes" counts
  /// and rates are shown as sizes (kB, MB, GB).
  ProgressBar(std::string label, int64_t total, std::string unit);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// Sets the count done so far and an optional extra text (rates, metrics) shown after the bar.
  void update(int64_t done, const std::string& extra = "");
  /// Draws the final state and ends the line.
  void finish(const std::string& extra = "");
  double elapsed_seconds() const;

 private:
  void draw(bool final_draw);

  std::string label_, unit_, extra_;
  int64_t total_ = 0, done_ = 0;
  bool terminal_ = false, enabled_ = true, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

/// Formats seconds as H:MM:SS or M:SS.
std::string format_duration(double seconds);

}  // namespace probekit
