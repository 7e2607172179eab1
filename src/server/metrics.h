// What GET /metrics reports, in Prometheus' text exposition format (version 0.0.4), every name prefixed probekit_:
// requests by endpoint and status, the queue's depth, open streams, the streams of each decode step, tokens
// generated, and the time to a stream's first token and between its tokens as histograms.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace probekit::server {

/// A Prometheus histogram: cumulative counts per upper bound, the sum and the count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
  void observe(double value);
  /// Its lines (NAME_bucket{le=...}, NAME_sum, NAME_count) after its HELP and TYPE lines.
  std::string exposition(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  /// A request answered: `endpoint` is the route ("/v1/rank"; "other" for paths without one).
  void count_request(const std::string& endpoint, int status);
  /// A decode step of `streams` streams.
  void observe_step(int64_t streams);
  /// A stream's token: `first` (seconds since the request was queued) or the gap since its previous token.
  void observe_token(bool first, double seconds);

  /// Everything, with the gauges read now.
  std::string exposition(int64_t queue_depth, int64_t open_streams) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram batch_sizes_, first_token_, token_gap_;
  uint64_t tokens_ = 0, steps_ = 0;
};

}  // namespace probekit::server
