#include "capture/window_queue.h"

#include <algorithm>
#include <cmath>

namespace probekit::capture {

size_t windows_open(size_t workers, double window_bytes, double host_bytes) {
  size_t open = std::max<size_t>(2, workers);
  if (host_bytes > 0 && window_bytes > 0) {
    const double fit = std::floor(host_bytes / 4 / window_bytes);
    open = std::min(open, static_cast<size_t>(std::max(2.0, fit)));
  }
  return open;
}

WindowQueue::WindowQueue(int64_t start, int64_t end, int64_t window, size_t max_open, MakeWindow make)
    : next_begin_(start), end_(end), window_(window), max_open_(std::max<size_t>(1, max_open)), make_(std::move(make)) {}

std::optional<WindowQueue::Task> WindowQueue::next(bool wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!aborted_) {
    for (size_t i = 0; i < open_.size(); ++i) {
      Open& open = open_[i];
      if (open.handed_out < open.work.batches.size()) {
        return Task{open.work.rows, &open.work.batches[open.handed_out++], first_open_ + i};
      }
    }
    if (next_begin_ >= end_) return std::nullopt;
    if (open_.size() < max_open_) {
      int64_t begin = next_begin_;
      next_begin_ = std::min(end_, begin + window_);
      open_.push_back(Open{make_(begin, next_begin_)});
      continue;
    }
    if (!wait) return std::nullopt;
    changed_.wait(lock);
  }
  return std::nullopt;
}

void WindowQueue::done(const Task& task, const std::function<void(std::shared_ptr<WindowRows>)>& finished) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++open_[task.window - first_open_].stored;
  while (!open_.empty() && open_.front().stored == open_.front().work.batches.size()) {
    finished(open_.front().work.rows);
    open_.pop_front();
    ++first_open_;
  }
  changed_.notify_all();
}

void WindowQueue::abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = true;
  changed_.notify_all();
}

}  // namespace probekit::capture
