#include "server/probe_server.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <httplib.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/utf8_text.h"
#include "model/weights.h"
#include "server/generation_stream.h"
#include "server/handlers.h"
#include "server/http_service.h"
#include "server/routes.h"
#include "server/api/request_framing.h"
#include "server/api/requests.h"

namespace probekit::server {

namespace {

// The media type is compared without its parameters (charset) and in any case, as RFC 9110 has it.
void check_json_body(const httplib::Request& req) {
  const std::string given = req.get_header_value("Content-Type");
  std::string media_type(trimmed(std::string_view(given).substr(0, given.find(';'))));
  for (char& c : media_type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (media_type != "application/json") {
    throw RequestError(415, "send the body as JSON, with the header Content-Type: application/json");
  }
}

ServiceOptions service_options(const ServerOptions& options,
                               std::function<std::string(int, const std::string&, const std::string&)> refusal) {
  ServiceOptions service;
  service.intake.refusal = std::move(refusal);
  service.workers = options.http_threads;
  service.max_connections = options.max_connections;
  service.intake.framing.max_body_bytes = options.limits.max_body_bytes;
  service.intake.client_timeout = std::chrono::milliseconds(static_cast<int64_t>(options.client_timeout_s * 1000));
  service.intake.api_key = options.api_key;
  return service;
}

Clock::time_point deadline_of(const Limits& limits) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.request_timeout_s));
}

// A JSON endpoint: the body parsed by `parse`, answered by `answer` (refusals thrown, answered by server::answer).
template <typename Parse, typename Answer>
std::function<void(const httplib::Request&, httplib::Response&)> json_endpoint(Parse parse, Answer answer,
                                                                               const ServerOptions& options) {
  return [parse, answer, &options](const httplib::Request& req, httplib::Response& res) {
    Clock::time_point deadline = deadline_of(options.limits);
    check_json_body(req);
    send_json(res, 200, answer(parse(req.body, options.limits), deadline));
  };
}

// The engine; a checkpoint without an LM head is refused saying how to serve it anyway.
inference::Engine load_engine(const ServerOptions& options) {
  try {
    return inference::Engine::load(options.engine);
  } catch (const model::MissingLmHead& e) {
    fail("{}: probe_server loads the LM head for /v1/generate; pass --no-generate to serve rankings and per-token "
         "scores without it",
         e.what());
  }
}

}  // namespace

ProbeServer::ProbeServer(const ServerOptions& options)
    : options_(options),
      engine_(load_engine(options)),
      chat_model_(ChatModel::load(options.engine.model_dir.empty() ? engine_.model_dir() : options.engine.model_dir,
                                  engine_.model_dir())) {
  scheduler_ = std::make_unique<Scheduler>(engine_, options_.limits.max_queued_texts,
                                           std::chrono::duration<double, std::milli>(options_.join_window_ms));
  routes_ = routes();
  // Refusals before a request is whole come in its endpoint's error shape (OpenAI's on /v1/chat/completions) and
  // are counted as every answer is.
  http_ = std::make_unique<HttpService>(
      service_options(options_, [this](int status, const std::string& message, const std::string& path) {
        scheduler_->metrics().count_request(endpoint_of(routes_, path), status);
        return json_response(status, error_json(status, message, "", error_style_of(routes_, path)));
      }));
  add_error_handlers();
  add_routes();
}

ProbeServer::~ProbeServer() { stop(); }

// The endpoints, one row each (docs/layout.md: adding an endpoint).
std::vector<Route> ProbeServer::routes() {
  ServerContext context{engine_, *scheduler_, options_};
  std::vector<Route> table = {
      {"GET", "/", ErrorStyle::kProbekit,
       [](const httplib::Request&, httplib::Response& res) {
         // Nothing from elsewhere may load: the page is self-contained and talks to this server only.
         res.set_header("Content-Security-Policy",
                        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                        "img-src data:");
         res.set_content(page_html(), "text/html; charset=utf-8");
       }},
      {"GET", "/healthz", ErrorStyle::kProbekit,
       [](const httplib::Request&, httplib::Response& res) { send_json(res, 200, {{"status", "ok"}}); }},
      {"GET", "/metrics", ErrorStyle::kProbekit,
       [this](const httplib::Request&, httplib::Response& res) {
         res.set_content(scheduler_->metrics().exposition(scheduler_->queue_depth(), open_streams_),
                         "text/plain; version=0.0.4; charset=utf-8");
       }},
      {"GET", "/v1/info", ErrorStyle::kProbekit,
       [this, context](const httplib::Request&, httplib::Response& res) {
         Json info = info_response(context, open_streams_, options_.engine.generate);
         info["chat"] = chat_model_.chat_template != nullptr;  // the page's chat view needs the model's template
         if (!chat_model_.problem.empty()) info["chat_problem"] = chat_model_.problem;
         send_json(res, 200, info);
       }},
      {"POST", "/v1/rank", ErrorStyle::kProbekit,
       json_endpoint(parse_rank_query,
                     [context](const RankQuery& q, Clock::time_point deadline) { return rank_response(context, q, deadline); },
                     options_)},
      {"POST", "/v1/per-token", ErrorStyle::kProbekit,
       json_endpoint(parse_per_token_query,
                     [context](const PerTokenQuery& q, Clock::time_point deadline) {
                       return per_token_response(context, q, deadline);
                     },
                     options_)},
      {"POST", "/v1/generate", ErrorStyle::kProbekit,
       [this, context](const httplib::Request& req, httplib::Response& res) {
         check_json_body(req);
         GenerateQuery query = parse_generate_query(req.body, options_.limits);
         if (!options_.engine.generate) throw RequestError(404, "this server was started with --no-generate");
         serve_stream(res, [&](std::shared_ptr<EventStream> stream) {
           start_generation(context, query, std::move(stream), deadline_of(options_.limits));
         });
       }},
  };
  for (Route& route : openai_routes(context)) table.push_back(std::move(route));
  return table;
}

void ProbeServer::add_routes() {
  for (const Route& route : routes_) {
    auto handler = [route](const httplib::Request& req, httplib::Response& res) { answer(route, req, res); };
    if (route.method == "GET") {
      http_->Get(path_pattern(route), handler);
    } else {
      http_->Post(path_pattern(route), handler);
    }
  }
}

void ProbeServer::take_stream_slot() {
  if (open_streams_.fetch_add(1) >= options_.limits.max_streams) {
    --open_streams_;
    throw RequestError(429, fmt::format("{} generation streams are open, this server's limit (--max-streams); try again "
                                        "when one ends",
                                        options_.limits.max_streams));
  }
}

// A generation as server-sent events. The slot taken here (--max-streams) is given back once the connection has
// ended and the worker has let the generation go, however each ends: a client that goes away cancels the
// generation (before its prompt runs, or at its next token), and until then it holds the slot. Given back when the
// connection ended, it let clients that hung up at once put any number of prompts on the device.
void ProbeServer::serve_stream(httplib::Response& res, const std::function<void(std::shared_ptr<EventStream>)>& start) {
  take_stream_slot();
  auto stream = std::make_shared<EventStream>([this] { --open_streams_; });
  start(stream);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream](size_t, httplib::DataSink& sink) {
        bool last = false;
        // A comment line every second while the worker is busy elsewhere finds a client that went away.
        std::optional<std::string> event = stream->next(std::chrono::milliseconds(1000), last);
        std::string bytes = event ? *event : std::string(": waiting\n\n");
        if (!sink.write(bytes.data(), bytes.size())) return false;
        if (last) sink.done();
        return true;
      },
      [stream](bool) { stream->cancel(); });
}

// GET /v1/models, GET /v1/models/{model} and POST /v1/chat/completions, errors in OpenAI's shape.
std::vector<Route> ProbeServer::openai_routes(const ServerContext& context) {
  return {
      {"GET", "/v1/models", ErrorStyle::kOpenAI,
       [this](const httplib::Request&, httplib::Response& res) { send_json(res, 200, models_response(chat_model_)); }},
      {"GET", "/v1/models/{model}", ErrorStyle::kOpenAI,
       [this](const httplib::Request& req, httplib::Response& res) {
         send_json(res, 200, model_response(chat_model_, req.matches[1].str()));
       }},
      {"POST", "/v1/chat/completions", ErrorStyle::kOpenAI,
       [this, context](const httplib::Request& req, httplib::Response& res) {
         check_json_body(req);
         ChatQuery query = parse_chat_query(req.body, options_.limits);
         if (!options_.engine.generate) throw RequestError(404, "this server was started with --no-generate");
         Clock::time_point deadline = deadline_of(options_.limits);
         if (query.stream) {
           return serve_stream(res, [&](std::shared_ptr<EventStream> stream) {
             start_chat_stream(context, chat_model_, query, std::move(stream), deadline);
           });
         }
         take_stream_slot();
         std::shared_ptr<void> slot(nullptr, [this](void*) { --open_streams_; });
         send_json(res, 200, chat_completion_response(context, chat_model_, query, deadline, std::move(slot)));
       }},
  };
}

void ProbeServer::add_error_handlers() {
  std::string api_key = options_.api_key;
  const std::vector<Route>& routes = routes_;
  http_->set_pre_routing_handler([api_key, &routes](const httplib::Request& req, httplib::Response& res) {
    if (api_key.empty() || !needs_api_key(req.path) || bearer_matches(req.get_header_value("Authorization"), api_key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    const std::string message = req.has_header("Authorization")
                                    ? "the header Authorization does not carry this server's API key: send "
                                      "Authorization: Bearer KEY (--api-key)"
                                    : "this server needs its API key: send the header Authorization: Bearer KEY (--api-key)";
    send_error(res, 401, message, "", error_style_of(routes, req.path));
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib's own refusals (no such route, a malformed request) come without a body. A body past --max-body-bytes
  // never reaches httplib: the request framing refuses it first.
  http_->set_error_handler(httplib::Server::HandlerWithResponse([&routes](const httplib::Request& req,
                                                                          httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const std::string allowed = allowed_methods(routes, req.path);
    if (res.status == 404 && !allowed.empty()) {
      res.set_header("Allow", allowed);
      send_error(res, 405, fmt::format("{} {} is not served: this endpoint takes {}", req.method, req.path, allowed), "",
                 error_style_of(routes, req.path));
    } else if (res.status == 404) {
      send_error(res, 404, fmt::format("no endpoint {} {} (the endpoints: {})", req.method, req.path, endpoint_list(routes)),
                 "", error_style_of(routes, req.path));
    } else {
      send_error(res, res.status, fmt::format("the server could not read the request (HTTP {})", res.status), "",
                 ErrorStyle::kProbekit);
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([&routes](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("{} {}: {}", req.method, req.path, what);
    send_error(res, 500, fmt::format("internal error: {}", what), "", error_style_of(routes, req.path));
  });
  // Every answer counted by endpoint and status (a stream once it has ended).
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    scheduler_->metrics().count_request(endpoint_of(routes_, req.path), res.status);
  });
}

int64_t ProbeServer::open_connections() const { return http_->open_connections(); }

int ProbeServer::bind() { return http_->listen_on(options_.host, options_.port); }

void ProbeServer::serve() { http_->serve(); }

void ProbeServer::stop() {
  if (stopping_.exchange(true)) return;
  scheduler_->stop();
  http_->stop();
}

namespace {

volatile std::sig_atomic_t stop_signal = 0;

extern "C" void note_stop_signal(int signal) { stop_signal = signal; }

// SIGINT and SIGTERM noted by a handler while the server runs, whichever thread they reach. (Blocking them and
// waiting for them in one thread missed threads started before the block: CUDA's own, on a GPU, took SIGTERM's
// default action and the process died without shutting down.)
class StopSignals {
 public:
  StopSignals() {
    stop_signal = 0;
    struct sigaction action {};
    action.sa_handler = note_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    // One the process started with ignored stays ignored, as in the batch tools (sh starts a script's background
    // job with SIGINT ignored, so that the terminal's Ctrl-C leaves it running).
    for (auto [number, previous] : {std::pair{SIGINT, &previous_interrupt_}, std::pair{SIGTERM, &previous_terminate_}}) {
      sigaction(number, nullptr, previous);
      if (previous->sa_handler != SIG_IGN) sigaction(number, &action, nullptr);
    }
  }
  ~StopSignals() {
    sigaction(SIGINT, &previous_interrupt_, nullptr);
    sigaction(SIGTERM, &previous_terminate_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  /// The stop signal that arrived within about 100 ms, or 0.
  static int wait() {
    for (int step = 0; step < 10 && stop_signal == 0; ++step) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return stop_signal;
  }

 private:
  struct sigaction previous_interrupt_ {}, previous_terminate_ {};
};

}  // namespace

void run_probe_server(ServerOptions options) {
  resolve_api_key(options);
  check_server_options(options);
  StopSignals stop_signals;
  ProbeServer server(options);
  int port = server.bind();
  std::string host = options.host.find(':') != std::string::npos && options.host.front() != '[' ? "[" + options.host + "]"
                                                                                                  : options.host;
  fmt::print("probe_server: {} labels, layers {}, on http://{}:{}/\n", server.engine().labels().size(),
             fmt::join(server.engine().layers(), ","), host, port);
  std::fflush(stdout);
  std::atomic<bool> served{false};
  std::thread watcher([&] {
    while (!served) {
      if (int signal = StopSignals::wait(); signal > 0) {
        spdlog::info("{}: shutting down", strsignal(signal));
        server.stop();
        return;
      }
    }
  });
  try {
    server.serve();
  } catch (...) {
    served = true;
    watcher.join();
    throw;
  }
  served = true;
  watcher.join();
  spdlog::info("stopped");
}

}  // namespace probekit::server
