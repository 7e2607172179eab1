#include "server/routes.h"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <stdexcept>

#include "server/api/chat_request.h"
#include "server/api/requests.h"

namespace probekit::server {

namespace {

// How many leading characters, up to a '/', `path` shares with `route` (a whole route, then '/' or the end, counts
// as the route's length plus one, so "/v1/models/x" belongs with "/v1/models").
size_t shared_folders(const std::string& route, const std::string& path) {
  if (path.compare(0, route.size(), route) == 0 && (path.size() == route.size() || path[route.size()] == '/')) {
    return route.size() + 1;
  }
  size_t shared = 0;
  for (size_t i = 0; i < route.size() && i < path.size() && route[i] == path[i]; ++i) {
    if (route[i] == '/') shared = i + 1;
  }
  return shared;
}

// Where a route's parameter folder begins (npos: it has none).
size_t parameter_start(const Route& route) {
  const size_t slash = route.path.rfind('/');
  return route.path.compare(slash + 1, 1, "{") == 0 && route.path.back() == '}' ? slash + 1 : std::string::npos;
}

// The OpenAI API's endpoint folders besides chat and models, which this server serves: an OpenAI client asking for
// one gets its 404 in the shape it reads.
constexpr const char* kOpenAIFoldersNotServed[] = {
    "/v1/assistants", "/v1/audio",    "/v1/batches", "/v1/completions", "/v1/containers", "/v1/conversations",
    "/v1/embeddings", "/v1/evals",    "/v1/files",   "/v1/fine_tuning", "/v1/images",     "/v1/moderations",
    "/v1/realtime",   "/v1/responses", "/v1/threads", "/v1/uploads",    "/v1/vector_stores"};

}  // namespace

void send_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

Json error_json(int status, const std::string& message, const std::string& field, ErrorStyle style) {
  return style == ErrorStyle::kOpenAI ? openai_error_body(status, message, field) : error_body(message, field);
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& field, ErrorStyle style) {
  send_json(res, status, error_json(status, message, field, style));
}

void answer(const Route& route, const httplib::Request& req, httplib::Response& res) {
  try {
    route.handle(req, res);
  } catch (const RequestError& e) {
    send_error(res, e.status(), e.what(), e.field(), route.errors);
  } catch (const std::invalid_argument& e) {
    send_error(res, 400, e.what(), "", route.errors);
  } catch (const std::exception& e) {
    spdlog::error("{} {}: {}", req.method, req.path, e.what());
    send_error(res, 500, fmt::format("internal error: {}", e.what()), "", route.errors);
  }
}

ErrorStyle error_style_of(const std::vector<Route>& routes, const std::string& path) {
  for (const char* folder : kOpenAIFoldersNotServed) {
    if (shared_folders(folder, path) == std::char_traits<char>::length(folder) + 1) return ErrorStyle::kOpenAI;
  }
  ErrorStyle style = ErrorStyle::kProbekit;
  size_t best = 0;
  for (const Route& route : routes) {
    const size_t shared = shared_folders(route.path, path);
    if (shared > best) {
      style = route.errors;
      best = shared;
    } else if (shared == best) {
      style = route.errors == ErrorStyle::kProbekit ? ErrorStyle::kProbekit : style;
    }
  }
  return style;
}

bool serves(const Route& route, const std::string& path) {
  const size_t start = parameter_start(route);
  if (start == std::string::npos) return route.path == path;
  return path.size() > start && path.compare(0, start, route.path, 0, start) == 0;
}

std::string path_pattern(const Route& route) {
  const size_t start = parameter_start(route);
  return start == std::string::npos ? route.path : route.path.substr(0, start) + "(.+)";
}

std::string endpoint_of(const std::vector<Route>& routes, const std::string& path) {
  for (const Route& route : routes) {
    if (serves(route, path)) return route.path;
  }
  return "other";
}

std::string allowed_methods(const std::vector<Route>& routes, const std::string& path) {
  std::string methods;
  for (const Route& route : routes) {
    if (serves(route, path)) methods += (methods.empty() ? "" : ", ") + route.method;
  }
  return methods;
}

std::string endpoint_list(const std::vector<Route>& routes) {
  std::string list;
  for (const Route& route : routes) list += (list.empty() ? "" : ", ") + route.method + " " + route.path;
  return list;
}

}  // namespace probekit::server
