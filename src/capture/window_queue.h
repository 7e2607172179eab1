// Hands the batches of a capture run's windows to several workers (model replicas, or the pipeline stages of a
// split model) across window boundaries: a worker that finds no batch left in the oldest open window takes one
// of the next window, so that no device idles while the last batch of a window finishes elsewhere. Windows
// still complete, and go to the writer, in run order, so the files and --resume are what one worker makes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "capture/outputs.h"

namespace probekit::capture {

/// A window's row buffers and its batches (run positions).
struct WindowWork {
  std::shared_ptr<WindowRows> rows;
  std::vector<std::vector<int64_t>> batches;
};

/// How many windows a run keeps open: one a worker and at least two, so that a worker seldom finds every open window's
/// batches handed out while the oldest one's last batch still runs elsewhere (four replicas sharing two open windows
/// of about five batches ran at 3.24x one GPU, with windows of seven or eight batches at 3.69x); fewer where their
/// rows, `window_bytes` each, would take more than a quarter of the host's `host_bytes` (0: unknown, no limit).
size_t windows_open(size_t workers, double window_bytes, double host_bytes);

class WindowQueue {
 public:
  /// Makes window [begin, end) when the first batch of it is asked for.
  using MakeWindow = std::function<WindowWork(int64_t begin, int64_t end)>;

  /// Windows of `window` run positions from `start` to `end`, at most `max_open` of them computing at once
  /// (each holds its rows in host memory until written).
  WindowQueue(int64_t start, int64_t end, int64_t window, size_t max_open, MakeWindow make);

  /// A batch handed to a worker.
  struct Task {
    std::shared_ptr<WindowRows> rows;
    const std::vector<int64_t>* batch = nullptr;
    size_t window = 0;  // its window's number in the run
  };

  /// The next batch to run; waits while `max_open` windows are open and all their batches handed out (with
  /// `wait` false, returns nullopt then); nullopt once every batch is handed out, or after abort().
  std::optional<Task> next(bool wait = true);
  /// Records that a task's rows are stored; calls `finished` (under the queue's lock, so in run order) with each
  /// window that is now complete.
  void done(const Task& task, const std::function<void(std::shared_ptr<WindowRows>)>& finished);
  /// Stops handing out batches (a worker failed), releasing the workers that wait.
  void abort();

 private:
  struct Open {
    WindowWork work;
    size_t handed_out = 0, stored = 0;
  };

  int64_t next_begin_, end_, window_;
  size_t max_open_;
  MakeWindow make_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Open> open_;     // windows not yet complete, in run order
  size_t first_open_ = 0;     // the number of open_.front()
  bool aborted_ = false;
};

}  // namespace probekit::capture
