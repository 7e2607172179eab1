#include "monitor/actions.h"

namespace probekit::monitor {

const std::vector<ActionRow>& actions() {
  static const std::vector<ActionRow> rows{
      {"flag", "the stream goes on; the token where it fired carries the firing", ActionSteering::kNone, false,
       [](MonitoredStream&) {}},
      {"stop", "the stream ends at the token that fired, which is not sent (finish_reason content_filter)",
       ActionSteering::kNone, false, [](MonitoredStream& stream) { stream.stop(); }},
      {"steer", "the stream alone is steered by the policy's additions from its next token on", ActionSteering::kRequired,
       false, [](MonitoredStream& stream) { stream.steer(); }},
      {"ablate", "the policy's directions (by default the label's own at the monitor's layer) are projected out of the "
                 "stream from its next token on",
       ActionSteering::kOwnLabel, true, [](MonitoredStream& stream) { stream.steer(); }},
  };
  return rows;
}

const ActionRow* find_action(const std::string& name) {
  for (const ActionRow& row : actions()) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

std::string action_names() {
  std::string names;
  for (const ActionRow& row : actions()) names += (names.empty() ? "" : ", ") + std::string(row.name);
  return names;
}

}  // namespace probekit::monitor
