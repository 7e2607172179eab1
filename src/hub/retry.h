// How the hub client tries again a request that failed in a way that may pass (a NetworkError: no answer, a
// dropped or stalled transfer, a 5xx or a 429), as huggingface_hub's http_backoff does: a bounded number of
// tries, waits growing exponentially up to a cap, and a server's Retry-After honoured up to a bound, so that
// neither a hub in trouble nor a hostile one holds a run for long.
#pragma once

#include <functional>
#include <string>

#include "hub/hub_settings.h"

namespace probekit::hub {

/// The wait after `failed_attempts` failed tries: the Retry-After (>= 0) up to settings.max_retry_after_seconds,
/// else settings.retry_wait_seconds doubled per earlier failure, up to settings.max_retry_wait_seconds.
double retry_wait_seconds(const HubSettings& settings, int failed_attempts, double retry_after_seconds);

/// Runs `attempt` until it returns without a NetworkError, at most settings.max_attempts times, logging each
/// failure ("`what`: the error (attempt i of n); `next` in W s") and waiting as retry_wait_seconds says. The last
/// try's NetworkError propagates. `next` says what the next try does ("trying again" when not given).
void retry_network_errors(const HubSettings& settings, const std::string& what, const std::function<void()>& attempt,
                          const std::function<std::string()>& next = {});

}  // namespace probekit::hub
