#include "hub/hub_settings.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "common/error.h"
#include "common/files.h"
#include "common/utf8_text.h"
#include "hub/http_client.h"

namespace probekit::hub {

namespace {

constexpr uint64_t kMaxTokenFileBytes = 64 << 10;  // a token is some 40 characters

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// "~" and "~/..." as Python's os.path.expanduser reads them.
std::string expand_user(const std::string& path) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  return environment("HOME") + path.substr(1);
}

std::string hf_home() {
  std::string home = environment("HF_HOME");
  if (!home.empty()) return expand_user(home);
  std::string xdg = environment("XDG_CACHE_HOME");
  return (xdg.empty() ? expand_user("~/.cache") : expand_user(xdg)) + "/huggingface";
}

// $HF_HUB_DOWNLOAD_TIMEOUT as huggingface_hub reads it (unset, empty or 0: the default), fractions allowed.
double stall_seconds_from_environment() {
  std::string text = environment("HF_HUB_DOWNLOAD_TIMEOUT");
  if (text.empty()) return kDefaultStallSeconds;
  char* end = nullptr;
  double seconds = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(seconds) || seconds < 0) {
    fail("HF_HUB_DOWNLOAD_TIMEOUT={} is not a number of seconds", text);
  }
  return seconds == 0 ? kDefaultStallSeconds : seconds;
}

}  // namespace

bool is_true_value(const char* value) {
  if (value == nullptr) return false;
  std::string upper;
  for (const char* c = value; *c != '\0'; ++c) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
  return upper == "1" || upper == "ON" || upper == "YES" || upper == "TRUE";
}

HubSettings settings_from_environment() {
  HubSettings settings;
  std::string endpoint = environment("HF_ENDPOINT");
  if (!endpoint.empty()) settings.endpoint = endpoint;
  while (!settings.endpoint.empty() && settings.endpoint.back() == '/') settings.endpoint.pop_back();
  // Without a scheme libcurl would guess http://, and the token would travel in the clear.
  if (settings.endpoint.rfind("https://", 0) != 0 && settings.endpoint.rfind("http://", 0) != 0) {
    fail("HF_ENDPOINT={} names no scheme: write https://{}", url_shown(endpoint), url_shown(endpoint));
  }

  // HUGGINGFACE_HUB_CACHE is the older name huggingface_hub still honours.
  std::string cache = environment("HF_HUB_CACHE");
  if (cache.empty()) cache = environment("HUGGINGFACE_HUB_CACHE");
  settings.cache_dir = cache.empty() ? hf_home() + "/hub" : expand_user(cache);

  std::string token_path = environment("HF_TOKEN_PATH");
  settings.token_file = token_path.empty() ? hf_home() + "/token" : expand_user(token_path);
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    settings.token = std::string(trimmed(environment(name)));
    if (!settings.token.empty()) {
      settings.token_source = name;
      break;
    }
  }
  if (settings.token.empty() && is_regular_file(settings.token_file)) {
    settings.token = std::string(trimmed(read_file(settings.token_file, kMaxTokenFileBytes)));
    if (!settings.token.empty()) settings.token_source = settings.token_file;
  }
  // huggingface_hub reads TRANSFORMERS_OFFLINE only when HF_HUB_OFFLINE is unset or empty.
  std::string offline = environment("HF_HUB_OFFLINE");
  if (offline.empty()) offline = environment("TRANSFORMERS_OFFLINE");
  settings.offline = is_true_value(offline.c_str());
  settings.stall_seconds = stall_seconds_from_environment();
  return settings;
}

}  // namespace probekit::hub
