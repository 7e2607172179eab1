#include "hub/hub_errors.h"

#include <fmt/format.h>

#include "hub/http_client.h"

namespace probekit::hub {

namespace {

std::string token_advice(const HubSettings& settings) {
  return fmt::format("set HF_TOKEN=hf_... (a token from {}/settings/tokens) or write the token to {}", url_shown(settings.endpoint),
                     settings.token_file);
}

std::string token_state(const HubSettings& settings) {
  if (!settings.token.empty()) return fmt::format("the token from {} was sent", settings.token_source);
  return fmt::format("no token was sent (HF_TOKEN is not set and {} holds none)", settings.token_file);
}

std::string explain_code(const RequestContext& request, const HttpResponse& response, const std::string& code,
                         const HubSettings& settings) {
  if (code == "GatedRepo") {
    return fmt::format("{} is a gated model: ask for access on {}/{} (logged in, accept its conditions), then {}; {}",
                       request.model, url_shown(settings.endpoint), request.model, token_advice(settings),
                       token_state(settings));
  }
  if (code == "RevisionNotFound") {
    return fmt::format("{} has no branch, tag or commit '{}'", request.model, request.revision);
  }
  if (code == "EntryNotFound") {
    return fmt::format("{} has no file {} at revision {}", request.model, request.file, request.revision);
  }
  bool unauthorized = response.status == 401 || response.status == 403;
  if (unauthorized && code.empty() && url_origin(request.url) != url_origin(settings.endpoint)) {
    // The hub named the file and sent us to the host that serves it; the token is never sent there.
    return fmt::format("the file's host refused the download, after the hub had described the file: a signed link "
                       "that expired (run again), or a network that blocks {}", url_origin(request.url));
  }
  if (code == "RepoNotFound" || (unauthorized && code.empty())) {
    if (settings.token.empty()) {
      return fmt::format("{} does not exist, or it is private and no token was sent: check the name; if you have "
                         "access, {}",
                         request.model, token_advice(settings));
    }
    return fmt::format("{} does not exist, or the token from {} cannot read it: check the name and the token's access",
                       request.model, settings.token_source);
  }
  // A mirror's 404 carries no X-Error-Code (regression: it read as "the hub refused the request").
  if (response.status == 404) {
    return fmt::format("not found: {} (HF_ENDPOINT) has no such repository, revision or file",
                       url_shown(settings.endpoint));
  }
  if (response.status == 429) return "too many requests: wait a minute and run the command again";
  if (response.status >= 500) return "the hub failed to answer; try again later";
  return "the hub refused the request";
}

}  // namespace

std::string explain_http_failure(const RequestContext& request, const HttpResponse& response, const HubSettings& settings) {
  return fmt::format("{}: {}: {}", request.model, request.file, explain_http_status(request, response, settings));
}

std::string explain_http_status(const RequestContext& request, const HttpResponse& response, const HubSettings& settings) {
  HubError error = read_hub_error(response.status, response.headers);
  std::string message = fmt::format("HTTP {} from {}: {}", response.status, url_shown(request.url),
                                    explain_code(request, response, error.code, settings));
  if (!error.message.empty()) message += fmt::format(" (the hub says: {})", error.message);
  return message;
}

NetworkError transient_failure(const RequestContext& request, const HttpResponse& response, const HubSettings& settings) {
  return NetworkError(explain_http_status(request, response, settings), response.status,
                      retry_after_seconds(response.headers));
}

bool is_missing_entry(const HttpResponse& response) {
  // A mirror that passes no X-Error-Code still answers 404 for a missing file.
  std::string code = read_hub_error(response.status, response.headers).code;
  return response.status == 404 && (code == "EntryNotFound" || code.empty());
}

bool is_transient_status(int status) { return status == 429 || status >= 500; }

}  // namespace probekit::hub
