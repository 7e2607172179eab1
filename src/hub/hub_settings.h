// Where the hub client talks to and where it keeps files, read from the environment exactly as huggingface_hub
// reads it, so Python and our tools share one cache and one token.
#pragma once

#include <string>

namespace probekit::hub {

/// huggingface_hub's DEFAULT_DOWNLOAD_TIMEOUT: seconds without a byte before a transfer counts as stalled.
constexpr double kDefaultStallSeconds = 10;

struct HubSettings {
  std::string endpoint = "https://huggingface.co";  // $HF_ENDPOINT, without a trailing '/'
  std::string cache_dir;    // $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
  std::string token;        // $HF_TOKEN, else the token file; empty when there is none
  std::string token_source; // where the token came from ("HF_TOKEN" or the file), for messages
  std::string token_file;   // where a token file is looked for, for advice
  bool offline = false;     // $HF_HUB_OFFLINE (or --offline): never touch the network
  // Tries of each request (a file's metadata, its download) that fails in a way that may pass: no answer, a
  // dropped or stalled transfer, a 5xx or a 429. A download's next try resumes with a Range request.
  int max_attempts = 5;
  double retry_wait_seconds = 1.0;       // before the second try, doubling after each failure...
  double max_retry_wait_seconds = 8.0;   // ...up to this, as huggingface_hub's http_backoff
  double max_retry_after_seconds = 60;   // a server's Retry-After is waited for up to this, not longer
  // $HF_HUB_DOWNLOAD_TIMEOUT: a request with no byte for this long is abandoned as stalled (and tried again).
  double stall_seconds = kDefaultStallSeconds;
};

/// The settings the environment describes; throws naming a variable whose value cannot be used.
HubSettings settings_from_environment();

/// A truthy environment value as huggingface_hub reads them: 1, ON, YES or TRUE in any case.
bool is_true_value(const char* value);

}  // namespace probekit::hub
