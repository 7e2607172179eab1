// probe_server as a library: the model and probes loaded once, served over HTTP (cpp-httplib) with a JSON API and
// a web page. The handlers call the same library functions multi_probe_inference calls (the engine, table_of,
// ranking_json, per_token_json), so the numbers and fields are the tool's; the device is used by one scheduler
// worker only.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "inference/engine.h"
#include "server/chat_completions.h"
#include "server/handlers.h"
#include "server/options.h"
#include "server/routes.h"
#include "server/scheduler.h"

namespace httplib {
struct Response;
}  // namespace httplib

namespace probekit::server {

class HttpService;

class ProbeServer {
 public:
  /// Loads the engine (model, tokenizer, probes) and declares the routes; serves nothing yet.
  explicit ProbeServer(const ServerOptions& options);
  ~ProbeServer();
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;

  /// Listens on --host and --port (0: any free port) and returns the port; throws naming the port when it cannot
  /// (one in use included: the port is never shared).
  int bind();
  /// Serves connections until stop(); call after bind().
  void serve();
  /// Ends open streams, refuses queued work and stops serving within about a second whatever the clients do; safe
  /// from any thread, idempotent.
  void stop();

  const inference::Engine& engine() const { return engine_; }
  Scheduler& scheduler() { return *scheduler_; }
  int64_t open_streams() const { return open_streams_; }
  /// Connections open now: reading a request, answering one, or kept alive.
  int64_t open_connections() const;

 private:
  /// The endpoints' table (routes.h); the OpenAI API's part from openai_routes.
  std::vector<Route> routes();
  std::vector<Route> openai_routes(const ServerContext& context);
  void add_routes();
  void add_error_handlers();
  /// Takes a stream slot (--max-streams), or throws 429.
  void take_stream_slot();
  /// Answers with the events `start` queues on a new stream (server-sent events), the slot freed at the end.
  void serve_stream(httplib::Response& res, const std::function<void(std::shared_ptr<EventStream>)>& start);

  ServerOptions options_;
  std::atomic<int64_t> open_streams_{0};  // before the scheduler: its streams give their slots back as it ends
  inference::Engine engine_;
  ChatModel chat_model_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<HttpService> http_;
  std::vector<Route> routes_;
  std::atomic<bool> stopping_{false};
};

/// The web page served at / (src/server/page.html, embedded at build time).
const std::string& page_html();

/// probe_server's body: settles the API key, checks the flags, loads, prints the URL on stdout, serves until SIGINT
/// or SIGTERM and then shuts down cleanly (open streams end, queued requests get 503).
void run_probe_server(ServerOptions options);

}  // namespace probekit::server
