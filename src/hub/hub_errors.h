// Messages for the hub's refusals. Each names the model, the file, the HTTP status and the URL, and tells the
// cases apart by the hub's X-Error-Code: a 401 is also what a missing or private repository answers to a request
// without a token, so only an answer saying GatedRepo is called gated.
#pragma once

#include <string>

#include "hub/http_client.h"
#include "hub/hub_settings.h"

namespace probekit::hub {

/// The request an answer belongs to.
struct RequestContext {
  std::string model;     // "org/name"
  std::string file;      // "config.json"
  std::string revision;  // the branch, tag or commit asked for
  std::string url;
};

/// The message for an HTTP error answer to `request`: "model: file: " and explain_http_status.
std::string explain_http_failure(const RequestContext& request, const HttpResponse& response, const HubSettings& settings);
/// "HTTP <status> from <url>: " what it means, and what the hub says.
std::string explain_http_status(const RequestContext& request, const HttpResponse& response, const HubSettings& settings);

/// An answer that may pass (is_transient_status) as the NetworkError that has it tried again, with its Retry-After.
NetworkError transient_failure(const RequestContext& request, const HttpResponse& response, const HubSettings& settings);

/// True when the answer says the file does not exist at that revision (the repository and revision do).
bool is_missing_entry(const HttpResponse& response);

/// True for answers worth trying again: the server's own failures (5xx) and rate limits (429).
bool is_transient_status(int status);

}  // namespace probekit::hub
