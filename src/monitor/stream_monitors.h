// Monitors as one stream runs them: each resolved policy (its probe's place in the token's score table, its
// threshold, its steering) keeps its running aggregate over its scope's tokens and fires once, at the first token
// whose aggregate is above its threshold. The scores are those the engine computes for each token anyway: watching
// costs no forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/json.h"
#include "monitor/actions.h"
#include "monitor/aggregates.h"
#include "monitor/policy.h"
#include "steering/steering.h"

namespace probekit::monitor {

/// A policy resolved against the engine's probes.
struct ResolvedMonitor {
  MonitorPolicy policy;
  size_t layer_index = 0;  // the token score table's row [layer][label]
  size_t column = 0;
  int64_t layer = 0;
  double threshold = 0;
  std::string threshold_source;  // "request", "calibration", "calibration of whole texts" or "validation"
  const AggregateRow* aggregate = nullptr;
  const ActionRow* action = nullptr;
  std::shared_ptr<const steering::SteeringVectors> steering;  // what steer and ablate apply; null for the others
};
using MonitorSet = std::vector<ResolvedMonitor>;

/// One monitor firing.
struct Firing {
  size_t monitor = 0;  // its index in the set
  std::string label;
  int64_t layer = 0;
  double score = 0;  // the aggregate that passed the threshold
  double threshold = 0;
  int64_t index = 0;  // the token: among the new tokens (completion) or the prompt's (prompt scope)
  Scope scope = Scope::kCompletion;
  std::string action;

  /// {label, layer, score, threshold, index, action} and the scope when it is the prompt.
  Json to_json() const;
};

/// A list of firings as JSON.
Json firings_json(const std::vector<Firing>& firings);

class StreamMonitors {
 public:
  explicit StreamMonitors(std::shared_ptr<const MonitorSet> set);

  /// Whether a monitor reads `scope`'s tokens.
  bool watches(Scope scope) const;
  /// Whether a steer or ablate monitor of the completion has not fired yet (its steering would start at the next
  /// token, so the stream batch does not launch the next token's pass ahead).
  bool steering_pending() const;
  /// Adds token `index` of `scope`, its own score `token_probability` [layer][label] and the probe's score of the
  /// text so far `text_probability` (the same for a linear probe, and for multimax and attention probes, whose
  /// tokens have no score of their own): the monitors of that scope firing at it.
  std::vector<Firing> observe(const std::vector<std::vector<double>>& token_probability,
                              const std::vector<std::vector<double>>& text_probability, int64_t index, Scope scope);
  const ResolvedMonitor& monitor(size_t i) const { return (*set_)[i]; }

 private:
  std::shared_ptr<const MonitorSet> set_;
  std::vector<std::unique_ptr<RunningAggregate>> aggregates_;
  std::vector<bool> fired_;
};

}  // namespace probekit::monitor
