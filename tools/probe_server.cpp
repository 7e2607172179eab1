// probe_server: loads a model and its probes once and serves them over HTTP: a JSON API (rankings, per-token
// scores, information) and a web page, on loopback unless told otherwise (then with an API key).
#include "cli/torch/torch_tool.h"
#include "server/probe_server.h"

using namespace probekit;

int main(int argc, char** argv) {
  return run_tool_main<server::ServerOptions>(
      argc, argv, "Serve a model and its trained probes over HTTP: a JSON API and a web page", server::add_server_flags,
      [argc, argv](server::ServerOptions& options) {
        server::hide_api_key_argument(argc, argv);
        server::run_probe_server(options);
      });
}
