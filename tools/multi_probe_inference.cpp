// multi_probe_inference: loads a model and its trained probes and ranks which labels a text shows, for one
// text, a file of texts, an interactive session, two texts compared, or every token of a text; or generates
// after a text while the probes score each new token.
#include <unistd.h>

#include <iostream>

#include "cli/cli.h"
#include "device/torch/gpu_utils.h"
#include "inference/session.h"

using namespace probekit;

int main(int argc, char** argv) {
  ToolCommandLine tool(argv, "Rank which labels a text shows, with a model and its trained probes");
  inference::InferenceRequest request;
  inference::add_inference_flags(tool.app, request);
  return tool.run(argc, argv, [&] {
    device::configure_threads(tool.common.threads);
    request.live_view = isatty(STDOUT_FILENO) != 0;
    inference::run_inference(request, std::cin, isatty(STDIN_FILENO) != 0);
  });
}
