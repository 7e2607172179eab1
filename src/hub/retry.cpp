#include "hub/retry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "hub/http_client.h"

namespace probekit::hub {

double retry_wait_seconds(const HubSettings& settings, int failed_attempts, double retry_after_seconds) {
  if (retry_after_seconds >= 0) return std::min(retry_after_seconds, settings.max_retry_after_seconds);
  double doubled = settings.retry_wait_seconds * std::pow(2.0, std::max(0, failed_attempts - 1));
  return std::min(doubled, settings.max_retry_wait_seconds);
}

void retry_network_errors(const HubSettings& settings, const std::string& what, const std::function<void()>& attempt,
                          const std::function<std::string()>& next) {
  for (int tries = 1;; ++tries) {
    try {
      attempt();
      return;
    } catch (const NetworkError& e) {
      if (tries >= settings.max_attempts) throw;
      double wait = retry_wait_seconds(settings, tries, e.retry_after_seconds());
      spdlog::warn("{}: {} (attempt {} of {}); {} in {:.1f} s", what, e.what(), tries, settings.max_attempts,
                   next ? next() : std::string("trying again"), wait);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
  }
}

}  // namespace probekit::hub
