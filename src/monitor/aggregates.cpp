#include "monitor/aggregates.h"

#include <algorithm>
#include <deque>
#include <limits>

namespace probekit::monitor {

namespace {

// The score as it comes: the token's own (a linear probe's score of it, an ema or rolling probe's per-token linear
// score; for multimax and attention probes, whose tokens have no score of their own, the score of the text so far),
// or for "probe" the probe's score of the text so far.
class TokenAggregate : public RunningAggregate {
 public:
  double add(double score) override { return score; }
};

class MaxAggregate : public RunningAggregate {
 public:
  double add(double score) override { return highest_ = std::max(highest_, score); }

 private:
  double highest_ = -std::numeric_limits<double>::infinity();
};

// e_0 = s_0, e_i = alpha s_i + (1 - alpha) e_{i-1}: the ema probe kind's average.
class EmaAggregate : public RunningAggregate {
 public:
  explicit EmaAggregate(double alpha) : alpha_(alpha) {}
  double add(double score) override {
    average_ = first_ ? score : alpha_ * score + (1 - alpha_) * average_;
    first_ = false;
    return average_;
  }

 private:
  double alpha_, average_ = 0;
  bool first_ = true;
};

// The mean of the last `window` scores (of all of them while fewer have come), as the rolling probe kind's windows.
class RollingAggregate : public RunningAggregate {
 public:
  explicit RollingAggregate(int64_t window) : window_(static_cast<size_t>(window)) {}
  double add(double score) override {
    scores_.push_back(score);
    sum_ += score;
    if (scores_.size() > window_) {
      sum_ -= scores_.front();
      scores_.pop_front();
    }
    return sum_ / static_cast<double>(scores_.size());
  }

 private:
  size_t window_;
  std::deque<double> scores_;
  double sum_ = 0;
};

template <typename Aggregate>
std::unique_ptr<RunningAggregate> make_plain(const MonitorPolicy&) {
  return std::make_unique<Aggregate>();
}

}  // namespace

const std::vector<AggregateRow>& aggregates() {
  static const std::vector<AggregateRow> rows{
      {"token", "the current token's score", make_plain<TokenAggregate>},
      {"max", "the highest score so far", make_plain<MaxAggregate>},
      {"ema", "the exponential moving average of the scores (alpha, default 0.1)",
       [](const MonitorPolicy& p) -> std::unique_ptr<RunningAggregate> { return std::make_unique<EmaAggregate>(p.alpha); }},
      {"rolling", "the mean of the last window scores (window, default 16)",
       [](const MonitorPolicy& p) -> std::unique_ptr<RunningAggregate> { return std::make_unique<RollingAggregate>(p.window); }},
      {"probe", "the probe's own score of the tokens so far (an ema, rolling or multimax probe's aggregate)",
       make_plain<TokenAggregate>, true},
  };
  return rows;
}

const AggregateRow* find_aggregate(const std::string& name) {
  for (const AggregateRow& row : aggregates()) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

std::string aggregate_names() {
  std::string names;
  for (const AggregateRow& row : aggregates()) names += (names.empty() ? "" : ", ") + std::string(row.name);
  return names;
}

}  // namespace probekit::monitor
