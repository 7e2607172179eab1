// How a monitor turns its probe's scores over the tokens so far into the one number it compares with its threshold.
// An open set: each aggregate is a row of aggregates() (aggregates.cpp); adding one is a class and a row there.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "monitor/policy.h"

namespace probekit::monitor {

/// One monitor's aggregate over the scores of its scope's tokens, one token at a time.
class RunningAggregate {
 public:
  virtual ~RunningAggregate() = default;
  /// Adds the next token's score and returns the aggregate over the tokens so far.
  virtual double add(double score) = 0;
};

struct AggregateRow {
  const char* name;
  const char* meaning;  // for the documentation and error messages
  std::unique_ptr<RunningAggregate> (*make)(const MonitorPolicy& policy);
  /// True for the aggregate that reads the probe's own score of the text so far rather than each token's score.
  bool reads_text_score = false;
};

/// Every aggregate, in the order the documentation lists them.
const std::vector<AggregateRow>& aggregates();
/// The row named `name`, or null.
const AggregateRow* find_aggregate(const std::string& name);
/// The aggregates' names, comma-separated (for messages).
std::string aggregate_names();

}  // namespace probekit::monitor
