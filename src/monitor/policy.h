// A monitor policy: which probe to watch (label, layer), how its scores over the tokens so far are aggregated, the
// threshold the aggregate must pass, which tokens it reads (the completion or the prompt) and what happens when it
// fires (an action of monitor/actions.h). Read from a request's "monitors" list, the Python package's monitors=, or
// the command line's --monitor LABEL[@LAYER][=THRESHOLD]:ACTION.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "server/api/requests.h"
#include "steering/steering.h"

namespace probekit::monitor {

/// A policy the model or its probes cannot run: the message and the field it is about ("monitors[0].label"). A
/// usage error (exit 2) on the command line; the server answers 400 naming the field.
class PolicyError : public UsageError {
 public:
  PolicyError(const std::string& message, std::string field) : UsageError(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

/// Which tokens a monitor reads.
enum class Scope {
  kCompletion,  // the generated tokens, as they come
  kPrompt,      // the prompt's tokens, before the first token is generated
};
const char* scope_name(Scope scope);

struct MonitorPolicy {
  std::string label;
  std::optional<int64_t> layer;      // none: the label's layer with the best validation AUC
  std::optional<double> threshold;   // none: the probe's calibrated threshold where set, else its validation one
  bool calibrated = true;            // false ("calibrated": false): the validation threshold, calibrated or not
  std::string aggregate = "token";   // a row of aggregates()
  double alpha = 0.1;                // ema
  int64_t window = 16;               // rolling
  Scope scope = Scope::kCompletion;
  std::string action = "flag";       // a row of actions()
  std::vector<steering::SteeringOp> steering;  // what steer and ablate apply (ablate without any: the label's direction)
};

/// The most policies one request may give.
constexpr int64_t kMaxMonitors = 16;
/// A monitor fires once its aggregate is at or above its threshold, as ranking and calibration count (score >=
/// threshold). Thresholds run from 0 to 1, and to the fp32 step just above 1: what calibration sets where no example
/// may be flagged and the top scores are 1 (probabilities are fp32, so a double's step above a score is not enough).
inline const double kMaxThreshold = static_cast<double>(std::nextafter(1.0f, 2.0f));
/// Whether `threshold` is one a monitor takes.
inline bool valid_threshold(double threshold) { return threshold >= 0 && threshold <= kMaxThreshold; }

/// A request's "monitors": a list of policy objects ({"label", "layer", "threshold" | "calibrated", "aggregate",
/// "alpha", "window", "scope", "action", "steer"}). Throws the server's RequestError (400) naming the field
/// ("monitors[1].aggregate").
std::vector<MonitorPolicy> parse_policies(const Json& monitors);

/// The steering operation of a request's or a policy's item: a probe's or a given vector's addition (ablation with
/// `ablate`), or an SAE latent's addition or clamp.
steering::SteeringOp steer_op(const server::SteerItem& item, bool ablate);

/// --monitor LABEL[@LAYER][=THRESHOLD]:ACTION, with --monitor-aggregate NAME[=PARAMETER] (ema=0.2, rolling=32),
/// --monitor-scope and the --on-fire-steer / --on-fire-ablate operations (for steer and ablate). A UsageError naming
/// the flag for anything malformed.
MonitorPolicy parse_monitor_flag(const std::string& text, const std::string& aggregate, const std::string& scope,
                                 const std::vector<steering::SteeringOp>& on_fire);

}  // namespace probekit::monitor
