// probe_server's options: where it listens, who may call it, and every bound on what a request may ask, in one
// struct (each bound is a flag; docs/probe_server.md lists them with their defaults).
#pragma once

#include <cstdint>
#include <string>

#include "cli/app_fwd.h"
#include "inference/engine.h"
#include "server/api/limits.h"

namespace probekit::server {

struct ServerOptions {
  ServerOptions() { engine.generate = true; }  // /v1/generate needs the whole model and its LM head

  inference::EngineOptions engine;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;   // the bearer token requests must carry (required off loopback); see resolve_api_key
  std::string api_key_file;  // --api-key-file: where to read it instead
  int http_threads = 16;  // --http-threads: requests answered at once, streams included
  int64_t max_connections = 512;  // --max-connections: open at once; past it new clients wait to be accepted
  double client_timeout_s = 10;   // --client-timeout: for a request's headers and body, and for an idle connection
  double join_window_ms = 2;      // --join-window: how long an idle worker waits for streams arriving together
  Limits limits;
};

/// Declares probe_server's flags on `app`, writing into `options`.
void add_server_flags(CLI::App& app, ServerOptions& options);

/// The environment variable probe_server reads its API key from when no flag gives one.
inline constexpr const char* kApiKeyVariable = "PROBE_SERVER_API_KEY";

/// Settles the API key: --api-key-file's first line, else --api-key, else $PROBE_SERVER_API_KEY (then removed from
/// the environment). A key that is empty or holds whitespace or control characters is a UsageError.
void resolve_api_key(ServerOptions& options);

/// Overwrites the value of --api-key in the process's own arguments, so that /proc/PID/cmdline and `ps` no longer
/// show it to other users (as daemons blank passwords); call once the flags are parsed.
void hide_api_key_argument(int argc, char** argv);

/// True for the loopback addresses (127.0.0.0/8, ::1, localhost).
bool is_loopback_host(const std::string& host);

/// Checks the flags together: a host other than loopback needs --api-key, and streams need HTTP threads to spare
/// for the other requests. Throws UsageError (exit 2).
void check_server_options(const ServerOptions& options);

}  // namespace probekit::server
