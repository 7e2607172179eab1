#include "monitor/policy.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>

#include "common/units.h"
#include "monitor/actions.h"
#include "monitor/aggregates.h"
#include "server/api/body_fields.h"

namespace probekit::monitor {

steering::SteeringOp steer_op(const server::SteerItem& item, bool ablate) {
  using steering::SteeringAction;
  using steering::SteeringOp;
  if (!item.sae.empty()) {
    return SteeringOp::sae_latent(item.clamp ? SteeringAction::kClamp : SteeringAction::kAdd, item.sae, item.latent,
                                  item.coefficient);
  }
  const SteeringAction action = ablate ? SteeringAction::kAblate : SteeringAction::kAdd;
  return item.label.empty() ? SteeringOp::given(action, item.vector, item.layer, item.coefficient)
                            : SteeringOp::probe(action, item.label, std::to_string(item.layer), item.coefficient);
}

namespace {

constexpr int64_t kMaxWindow = 1 << 20;  // tokens
constexpr int64_t kMaxLayer = 1 << 20;

// The policy's steering items as operations: additions for steer, ablations for ablate.
std::vector<steering::SteeringOp> steering_items(const Json& items, const std::string& field, bool ablates) {
  if (!items.is_array()) server::wrong_type(field, "a list of steering items", items);
  if (static_cast<int64_t>(items.size()) > server::kMaxSteeringItems) {
    throw server::RequestError(server::kBadRequest, fmt::format("'{}' holds more than {} items", field,
                                                                server::kMaxSteeringItems), field);
  }
  std::vector<steering::SteeringOp> ops;
  for (size_t i = 0; i < items.size(); ++i) {
    ops.push_back(steer_op(server::steer_item(items[i], fmt::format("{}[{}]", field, i), !ablates), ablates));
  }
  return ops;
}

// The checks a policy needs however it was given: its aggregate and action exist, the action's steering is there.
// Messages name `field` + the policy's field.
void check_policy(const MonitorPolicy& policy, const std::string& field) {
  if (find_aggregate(policy.aggregate) == nullptr) {
    throw PolicyError(fmt::format("'{}aggregate' must be one of {}, got '{}'", field, aggregate_names(), policy.aggregate),
                      field + "aggregate");
  }
  const ActionRow* action = find_action(policy.action);
  if (action == nullptr) {
    throw PolicyError(fmt::format("'{}action' must be one of {}, got '{}'", field, action_names(), policy.action),
                      field + "action");
  }
  if (action->steering == ActionSteering::kRequired && policy.steering.empty()) {
    throw PolicyError(fmt::format("'{}action' {} needs the steering it applies ('steer' items, --on-fire-steer)", field,
                                  policy.action), field + "steer");
  }
  if (action->steering == ActionSteering::kNone && !policy.steering.empty()) {
    throw PolicyError(fmt::format("'{}steer' applies to the actions steer and ablate, not to {}", field, policy.action),
                      field + "steer");
  }
  if (policy.threshold && !valid_threshold(*policy.threshold)) {
    throw PolicyError(fmt::format("'{}threshold' must be from 0 to 1, got {}", field, *policy.threshold), field + "threshold");
  }
}

MonitorPolicy policy_fields(server::BodyFields& fields) {
  MonitorPolicy policy;
  const Json& label = fields.required("label");
  if (!label.is_string() || label.get<std::string>().empty()) server::wrong_type("label", "a label's name", label);
  policy.label = label.get<std::string>();
  if (fields.take("layer") != nullptr) policy.layer = fields.integer("layer", 0, 0, kMaxLayer);
  const Json* calibrated = fields.take("calibrated");
  if (calibrated != nullptr) policy.calibrated = fields.boolean("calibrated", true);
  if (fields.take("threshold") != nullptr) {
    if (calibrated != nullptr) {
      throw server::RequestError(server::kBadRequest, "give 'threshold' or 'calibrated', not both", "threshold");
    }
    policy.threshold = fields.number("threshold", 0, 0, kMaxThreshold);
  }
  std::set<std::string> aggregates_named, actions_named;
  for (const AggregateRow& row : aggregates()) aggregates_named.insert(row.name);
  for (const ActionRow& row : actions()) actions_named.insert(row.name);
  policy.aggregate = fields.choice("aggregate", policy.aggregate, aggregates_named);
  // Each parameter belongs to one aggregate, as --monitor-aggregate's do: elsewhere it would be ignored.
  for (const auto& [parameter, owner] : {std::pair{"alpha", "ema"}, std::pair{"window", "rolling"}}) {
    if (fields.take(parameter) != nullptr && policy.aggregate != owner) {
      throw server::RequestError(server::kBadRequest,
                                 fmt::format("'{}' goes with the aggregate '{}', not '{}'", parameter, owner, policy.aggregate),
                                 parameter);
    }
  }
  policy.alpha = fields.number("alpha", policy.alpha, std::numeric_limits<double>::min(), 1);
  policy.window = fields.integer("window", policy.window, 1, kMaxWindow);
  policy.scope = fields.choice("scope", "completion", {"completion", "prompt"}) == "prompt" ? Scope::kPrompt : Scope::kCompletion;
  policy.action = fields.choice("action", policy.action, actions_named);
  if (const Json* items = fields.take("steer")) policy.steering = steering_items(*items, "steer", find_action(policy.action)->ablates);
  fields.reject_unknown();
  return policy;
}

}  // namespace

const char* scope_name(Scope scope) { return scope == Scope::kPrompt ? "prompt" : "completion"; }

std::vector<MonitorPolicy> parse_policies(const Json& monitors) {
  if (!monitors.is_array()) server::wrong_type("monitors", "a list of monitor policies", monitors);
  if (static_cast<int64_t>(monitors.size()) > kMaxMonitors) {
    throw server::RequestError(server::kBadRequest, fmt::format("'monitors' holds {} policies, more than {}",
                                                                monitors.size(), kMaxMonitors), "monitors");
  }
  std::vector<MonitorPolicy> policies;
  for (size_t i = 0; i < monitors.size(); ++i) {
    const std::string field = fmt::format("monitors[{}]", i);
    try {
      server::BodyFields fields(monitors[i], field);
      policies.push_back(policy_fields(fields));
      check_policy(policies.back(), field + ".");
    } catch (const server::RequestError& e) {
      // The fields of a policy name themselves alone: the message and the field get the policy's place.
      const bool named = e.field().rfind(field, 0) == 0;
      std::string message = e.what();
      if (!named && message.rfind("'", 0) == 0) message = "'" + field + "." + message.substr(1);
      throw server::RequestError(e.status(), named ? e.what() : message, named ? e.field() : field + "." + e.field());
    } catch (const PolicyError& e) {
      throw server::RequestError(server::kBadRequest, e.what(), e.field());
    }
  }
  return policies;
}

namespace {

// --monitor-aggregate NAME[=PARAMETER] into the policy.
void read_aggregate_flag(const std::string& text, MonitorPolicy& policy) {
  const size_t equals = text.find('=');
  policy.aggregate = text.substr(0, equals);
  if (find_aggregate(policy.aggregate) == nullptr) {
    fail_usage("--monitor-aggregate {}: expected one of {}, with =ALPHA for ema or =WINDOW for rolling", text, aggregate_names());
  }
  if (equals == std::string::npos) return;
  const std::string parameter = text.substr(equals + 1);
  if (policy.aggregate == "ema") {
    std::optional<double> alpha = parse_number(parameter);
    if (!alpha || !(*alpha > 0 && *alpha <= 1)) fail_usage("--monitor-aggregate {}: ema's alpha must be in (0, 1]", text);
    policy.alpha = *alpha;
  } else if (policy.aggregate == "rolling") {
    std::optional<int> window = parse_count(parameter);
    if (!window || *window < 1) fail_usage("--monitor-aggregate {}: rolling's window must be a positive token count", text);
    policy.window = *window;
  } else {
    fail_usage("--monitor-aggregate {}: {} takes no parameter", text, policy.aggregate);
  }
}

}  // namespace

MonitorPolicy parse_monitor_flag(const std::string& text, const std::string& aggregate, const std::string& scope,
                                 const std::vector<steering::SteeringOp>& on_fire) {
  constexpr const char* kForm = "LABEL[@LAYER][=THRESHOLD]:ACTION, e.g. deception@20=0.8:stop";
  MonitorPolicy policy;
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) fail_usage("--monitor {}: expected {}", text, kForm);
  policy.action = text.substr(colon + 1);
  std::string head = text.substr(0, colon);
  const size_t equals = head.rfind('=');
  if (equals != std::string::npos) {
    std::optional<double> threshold = parse_number(head.substr(equals + 1));
    if (!threshold || !valid_threshold(*threshold)) {
      fail_usage("--monitor {}: the threshold must be a number from 0 to 1 ({})", text, kForm);
    }
    policy.threshold = *threshold;
    head.resize(equals);
  }
  const size_t at = head.rfind('@');
  if (at != std::string::npos) {
    std::optional<int> layer = parse_count(head.substr(at + 1));
    if (!layer) fail_usage("--monitor {}: the layer must be a layer number ({})", text, kForm);
    policy.layer = *layer;
    head.resize(at);
  }
  if (head.empty()) fail_usage("--monitor {}: no label ({})", text, kForm);
  policy.label = head;
  if (!aggregate.empty()) read_aggregate_flag(aggregate, policy);
  if (scope != "completion" && scope != "prompt") fail_usage("--monitor-scope {}: expected completion or prompt", scope);
  policy.scope = scope == "prompt" ? Scope::kPrompt : Scope::kCompletion;
  const ActionRow* action = find_action(policy.action);
  if (action == nullptr) fail_usage("--monitor {}: the action must be one of {}", text, action_names());
  for (const steering::SteeringOp& op : on_fire) {
    const bool fits = (op.action == steering::SteeringAction::kAblate) == action->ablates;
    if (fits && action->steering != ActionSteering::kNone) policy.steering.push_back(op);
  }
  try {
    check_policy(policy, "");
  } catch (const PolicyError& e) {
    fail_usage("--monitor {}: {}", text, e.what());
  }
  return policy;
}

}  // namespace probekit::monitor
