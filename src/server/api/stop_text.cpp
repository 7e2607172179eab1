#include "server/api/stop_text.h"

#include <algorithm>

namespace probekit::server {

std::string StopText::take(size_t length) {
  std::string out = held_.substr(0, length);
  held_.erase(0, length);
  sent_ += out;
  return out;
}

std::string StopText::add(const std::string& piece) {
  if (stopped_) return {};
  held_ += piece;
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = take(first);
    held_.clear();
    return out;
  }
  // Held back: the longest end of the text that some stop string starts with.
  size_t kept = 0;
  for (const std::string& stop : stops_) {
    for (size_t length = std::min(stop.size() - 1, held_.size()); length > kept; --length) {
      if (held_.compare(held_.size() - length, length, stop, 0, length) == 0) {
        kept = length;
        break;
      }
    }
  }
  return take(held_.size() - kept);
}

std::string StopText::flush() {
  if (stopped_) return {};
  return take(held_.size());
}

}  // namespace probekit::server
