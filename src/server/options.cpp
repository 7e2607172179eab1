#include "server/options.h"

#include <cctype>
#include <cstdlib>

#include "cli/cli.h"
#include "common/error.h"
#include "common/files.h"
#include "inference/session.h"

namespace probekit::server {

void add_server_flags(CLI::App& app, ServerOptions& o) {
  inference::EngineOptions& e = o.engine;
  Limits& l = o.limits;
  app.add_option("--probes-dir", e.probes_dir,
                 "Probes directory (probes.json, or layer_{L}/ folders) of train_binary_probes, or of train_probes")
      ->required();
  add_model_options(app, e.model_dir, "The checkpoint the probes were trained on (default: the one recorded with them)");
  add_layers_option(app, e.layers, "Layers of a multi-layer probes directory to load: 8 17, 8,17, 21-30 or all (default: all)");
  inference::add_engine_flags(app, e, "Texts per forward pass (queued requests are scored together)");
  app.add_flag_callback("--no-generate", [&e] { e.generate = false; },
                        "Load the model only up to the deepest probed layer, without the LM head: less memory, no "
                        "/v1/generate");
  app.add_option("--host", o.host, "Address to listen on (another than loopback needs --api-key)")->capture_default_str();
  app.add_option("--port", o.port, "Port to listen on (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  CLI::Option* key = app.add_option("--api-key", o.api_key,
                                    "Bearer token every request but / and /healthz must carry (Authorization: Bearer KEY); "
                                    "other users see it in `ps` until the server starts: prefer --api-key-file or $" +
                                        std::string(kApiKeyVariable));
  app.add_option("--api-key-file", o.api_key_file, "File whose first line is the API key (see --api-key)")->excludes(key);
  app.add_option("--http-threads", o.http_threads,
                 "Requests answered at once, open streams included (requests still arriving take none)")
      ->capture_default_str()
      ->check(CLI::Range(2, 1024));
  app.add_option("--max-connections", o.max_connections,
                 "Connections open at once; more clients wait to be accepted, none is refused")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 16));
  app.add_option("--client-timeout", o.client_timeout_s,
                 "Seconds a client has to send a request's headers and body (from the connection, or from the previous "
                 "response); slow and idle connections are closed then")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 3600.0));
  app.add_option("--max-body-bytes", l.max_body_bytes, "Largest request body")->capture_default_str()->check(CLI::Range(int64_t{64}, int64_t{1} << 30));
  app.add_option("--max-texts", l.max_texts, "Most texts in one /v1/rank request")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--max-tokens", l.max_tokens, "Most tokens of one text or prompt")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--max-new-tokens", l.max_new_tokens, "Most tokens one /v1/generate request may ask for")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--max-streams", l.max_streams, "Most /v1/generate streams open at once")->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1000}));
  app.add_option("--join-window", o.join_window_ms,
                 "Milliseconds a worker with no stream decoding waits, after a stream arrives, for more arriving within "
                 "that time of each other (at most 10 times it in all), so that streams started together begin in one "
                 "pass over their prompts; 0: none")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  app.add_option("--max-queued-texts", l.max_queued_texts, "Most texts waiting for the device, all requests together")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--request-timeout", l.request_timeout_s, "Seconds a request (or a stream) may take in all")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
}

void resolve_api_key(ServerOptions& o) {
  std::string source = "--api-key";
  if (!o.api_key_file.empty()) {
    if (!path_exists(o.api_key_file)) fail_usage("--api-key-file {}: no such file (it holds the API key)", o.api_key_file);
    std::string text = read_file(o.api_key_file, 4096);
    o.api_key = text.substr(0, text.find('\n'));
    if (!o.api_key.empty() && o.api_key.back() == '\r') o.api_key.pop_back();
    source = "--api-key-file " + o.api_key_file;
    if (o.api_key.empty()) fail_usage("{}: the file's first line is empty; write the API key there", source);
  } else if (const char* variable = std::getenv(kApiKeyVariable); o.api_key.empty() && variable != nullptr) {
    o.api_key = variable;
    source = std::string("$") + kApiKeyVariable;
    // Nothing this process starts needs it.
    unsetenv(kApiKeyVariable);
    if (o.api_key.empty()) fail_usage("{} is set but empty", source);
  }
  for (char c : o.api_key) {
    if (std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c))) {
      fail_usage("{}: the API key holds a space or a control character, which an Authorization header cannot carry "
                 "intact",
                 source);
    }
  }
}

void hide_api_key_argument(int argc, char** argv) {
  // 'x' over each character, as daemons blank a password given on their command line.
  auto blank = [](char* value) {
    for (; *value != '\0'; ++value) *value = 'x';
  };
  const std::string flag = "--api-key";
  for (int i = 1; i < argc; ++i) {
    std::string argument = argv[i];
    if (argument == flag && i + 1 < argc) {
      blank(argv[++i]);
    } else if (argument.rfind(flag + "=", 0) == 0) {
      blank(argv[i] + flag.size() + 1);
    } else if (argument == "--") {
      return;
    }
  }
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

void check_server_options(const ServerOptions& o) {
  if (!is_loopback_host(o.host) && o.api_key.empty()) {
    fail_usage("--host {}: listening beyond this machine (loopback) needs --api-key (or --api-key-file, or ${}), the "
               "bearer token every request must then carry",
               o.host, kApiKeyVariable);
  }
  if (o.limits.max_streams >= o.http_threads) {
    fail_usage("--max-streams {} leaves none of the {} --http-threads for other requests; raise --http-threads",
               o.limits.max_streams, o.http_threads);
  }
}

}  // namespace probekit::server
