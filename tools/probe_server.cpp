// probe_server: loads a model and its probes once and serves them over HTTP: a JSON API (rankings, per-token
// scores, information) and a web page, on loopback unless told otherwise (then with an API key).
#include "cli/cli.h"
#include "device/torch/gpu_utils.h"
#include "server/probe_server.h"

using namespace probekit;

int main(int argc, char** argv) {
  ToolCommandLine tool(argv, "Serve a model and its trained probes over HTTP: a JSON API and a web page");
  server::ServerOptions options;
  server::add_server_flags(tool.app, options);
  return tool.run(argc, argv, [&] {
    device::configure_threads(tool.common.threads);
    server::run_probe_server(options);
  });
}
