// The server's endpoints as one table: each route's method, path, the shape of its errors and its handler. Errors
// are mapped to statuses once, here, for every route: a handler throws and never writes an error itself.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/json.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace probekit::server {

/// How a route's errors are shaped: ours ({"error": message, "field"}) or the OpenAI API's.
enum class ErrorStyle { kProbekit, kOpenAI };

struct Route {
  std::string method;  // "GET" or "POST"
  // Its last folder may be a parameter, "{name}": the rest of the path, slashes included, as in a model's name
  // "owner/name" (the handler's req.matches[1]).
  std::string path;
  ErrorStyle errors = ErrorStyle::kProbekit;
  /// Answers the request; refusals are thrown (RequestError with its status and field; std::invalid_argument: 400).
  std::function<void(const httplib::Request&, httplib::Response&)> handle;
};

/// Runs `route`'s handler, answering what it throws: RequestError with its status, std::invalid_argument 400, any
/// other exception 500 (logged), each in the route's error style.
void answer(const Route& route, const httplib::Request& req, httplib::Response& res);

/// The error style of a path no route serves exactly: the OpenAI API's for its endpoints that this server does not
/// serve (/v1/completions, /v1/embeddings, ...: their clients read only that shape), else that of the route sharing the
/// longest leading folders with it ("/v1/chat/x" is the OpenAI API's, "/v1/x" ours), ours on a tie.
ErrorStyle error_style_of(const std::vector<Route>& routes, const std::string& path);

/// Whether `route` serves `path` (a parameter matches the rest of it).
bool serves(const Route& route, const std::string& path);

/// The pattern httplib matches `route`'s paths with (a regular expression: the parameter as a group).
std::string path_pattern(const Route& route);

/// The route serving `path` ("other" for none), as /metrics counts requests.
std::string endpoint_of(const std::vector<Route>& routes, const std::string& path);

/// "GET, POST": the methods of the routes serving `path`, for a 405's Allow header ("" when none serves it).
std::string allowed_methods(const std::vector<Route>& routes, const std::string& path);

/// "GET /, GET /healthz, ...": every route, for the 404 answer.
std::string endpoint_list(const std::vector<Route>& routes);

/// Writes `body` as the JSON answer with `status`.
void send_json(httplib::Response& res, int status, const Json& body);

/// An error's body in `style`: probekit's {"error", "field"}, or OpenAI's {"error": {"message", "type", "param", "code"}}.
Json error_json(int status, const std::string& message, const std::string& field, ErrorStyle style);

/// Writes an error answer in `style`.
void send_error(httplib::Response& res, int status, const std::string& message, const std::string& field, ErrorStyle style);

}  // namespace probekit::server
