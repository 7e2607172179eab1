#include "monitor/monitor_flags.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <optional>

#include "common/units.h"

#include "monitor/actions.h"
#include "monitor/aggregates.h"

namespace probekit::monitor {

void add_monitor_flags(CLI::App& app, MonitorFlags& flags) {
  app.add_option("--monitor", flags.monitors,
                 "With --generate: watch a probe and act when it fires, LABEL[@LAYER][=THRESHOLD]:ACTION with ACTION " +
                     action_names() + " (repeatable; no threshold: the probe's calibrated one, else its validation one)");
  app.add_option("--monitor-aggregate", flags.aggregate,
                 "What --monitor compares with its threshold: " + aggregate_names() +
                     " (ema=ALPHA, rolling=WINDOW; default token)");
  app.add_option("--monitor-scope", flags.scope, "The tokens --monitor reads: completion or prompt")->capture_default_str();
  app.add_option("--on-fire-steer", flags.on_fire_steer,
                 "What a --monitor steer action adds from the next token on: LABEL@LAYER=COEF (as --steer; repeatable)");
  app.add_option("--on-fire-ablate", flags.on_fire_ablate,
                 "What a --monitor ablate action projects out: LABEL@LAYERS (as --ablate; default: the monitor's own "
                 "label at its layer)");
}

std::vector<MonitorPolicy> monitor_policies(const MonitorFlags& flags) {
  if (flags.monitors.empty()) {
    if (!flags.on_fire_steer.empty() || !flags.on_fire_ablate.empty() || !flags.aggregate.empty() ||
        flags.scope != MonitorFlags().scope) {
      fail_usage("--on-fire-steer, --on-fire-ablate, --monitor-aggregate and --monitor-scope go with --monitor");
    }
    return {};
  }
  std::vector<steering::SteeringOp> on_fire;
  for (const std::string& text : flags.on_fire_steer) on_fire.push_back(steering::parse_probe_addition(text));
  for (const std::string& text : flags.on_fire_ablate) on_fire.push_back(steering::parse_probe_ablation(text));
  std::vector<MonitorPolicy> policies;
  bool steers = false, ablates = false;
  for (const std::string& text : flags.monitors) {
    policies.push_back(parse_monitor_flag(text, flags.aggregate, flags.scope, on_fire));
    steers = steers || policies.back().action == "steer";
    ablates = ablates || policies.back().action == "ablate";
  }
  if (!flags.on_fire_steer.empty() && !steers) fail_usage("--on-fire-steer: no --monitor has the action steer");
  if (!flags.on_fire_ablate.empty() && !ablates) fail_usage("--on-fire-ablate: no --monitor has the action ablate");
  return policies;
}

UsageError as_flag_error(const MonitorFlags& flags, const PolicyError& error) {
  // "'monitors[1].layer': label 'x' has no probe at layer 5" -> "--monitor x@5:flag: label 'x' has no probe at layer 5"
  const std::string& field = error.field();
  const std::string message = error.what();
  const size_t open = field.find('['), close = field.find(']');
  const std::optional<int> index =
      open == std::string::npos || close == std::string::npos ? std::nullopt : parse_count(field.substr(open + 1, close - open - 1));
  const size_t colon = message.find("': ");
  if (!index || static_cast<size_t>(*index) >= flags.monitors.size() || colon == std::string::npos) return UsageError(message);
  return UsageError(fmt::format("--monitor {}: {}", flags.monitors[static_cast<size_t>(*index)], message.substr(colon + 3)));
}

}  // namespace probekit::monitor
