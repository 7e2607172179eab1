// What a monitor does when it fires. An open set: each action is a row of actions() (actions.cpp) acting on the
// stream through the MonitoredStream interface; adding one is a row there (and, for an effect streams cannot have
// yet, a method of the interface that the stream batch carries out).
#pragma once

#include <string>
#include <vector>

namespace probekit::monitor {

/// What an action may do to the stream its monitor fired in (inference::StreamBatch carries it out).
class MonitoredStream {
 public:
  virtual ~MonitoredStream() = default;
  /// Ends the stream at the token that fired, which is not sent (finish_reason content_filter).
  virtual void stop() = 0;
  /// Applies the monitor's steering to this stream alone from its next token on (conditional steering).
  virtual void steer() = 0;
};

/// What a policy's steering operations are to an action.
enum class ActionSteering {
  kNone,      // it takes none
  kRequired,  // it needs at least one ("steer": [...], --on-fire-steer)
  kOwnLabel,  // none given: the monitor's own label's direction at its layer (ablate)
};

struct ActionRow {
  const char* name;
  const char* effect;  // for the documentation and error messages
  ActionSteering steering;
  bool ablates;  // its operations project directions out rather than add them
  void (*act)(MonitoredStream& stream);
};

/// Every action, in the order the documentation lists them.
const std::vector<ActionRow>& actions();
/// The row named `name`, or null.
const ActionRow* find_action(const std::string& name);
/// The actions' names, comma-separated (for messages).
std::string action_names();

}  // namespace probekit::monitor
