// The monitor flags, declared once for every tool that generates with probes: --monitor, --monitor-aggregate,
// --monitor-scope, --on-fire-steer and --on-fire-ablate.
#pragma once

#include <string>
#include <vector>

#include "cli/app_fwd.h"
#include "monitor/policy.h"

namespace probekit::monitor {

struct MonitorFlags {
  std::vector<std::string> monitors;  // LABEL[@LAYER][=THRESHOLD]:ACTION
  std::string aggregate;              // NAME[=PARAMETER]; empty: token
  std::string scope = "completion";
  std::vector<std::string> on_fire_steer, on_fire_ablate;  // the steering flags' syntax

  bool empty() const { return monitors.empty(); }
};

void add_monitor_flags(CLI::App& app, MonitorFlags& flags);

/// The policies the flags give (none without --monitor); a UsageError naming the flag for anything malformed.
std::vector<MonitorPolicy> monitor_policies(const MonitorFlags& flags);

/// A policy's refusal by the probes (its field "monitors[i]..."), said of the --monitor flag that gave it.
UsageError as_flag_error(const MonitorFlags& flags, const PolicyError& error);

}  // namespace probekit::monitor
