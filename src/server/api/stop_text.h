// OpenAI's "stop" strings on a reply that arrives a piece at a time: the reply ends before the first stop string,
// which is never sent; text that might be the start of one is held back until the next piece shows it is not.
#pragma once

#include <string>
#include <vector>

namespace probekit::server {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  /// Adds a piece of the reply and returns the text that may be sent now. After a stop string appeared, the
  /// text before it has been returned and stopped() is true; later pieces return nothing.
  std::string add(const std::string& piece);
  /// The text held back (the reply ended without a stop string): it is the reply's too.
  std::string flush();
  bool stopped() const { return stopped_; }
  /// Everything returned so far.
  const std::string& sent() const { return sent_; }

 private:
  std::string take(size_t length);

  std::vector<std::string> stops_;
  std::string held_, sent_;
  bool stopped_ = false;
};

}  // namespace probekit::server
