// multi_probe_inference: loads a model and its trained probes and ranks which labels a text shows, for one
// text, a file of texts, an interactive session, two texts compared, or every token of a text; or generates
// after a text while the probes score each new token.
#include <unistd.h>

#include <iostream>

#include "cli/torch/torch_tool.h"
#include "inference/session.h"

using namespace probekit;

int main(int argc, char** argv) {
  return run_tool_main<inference::InferenceRequest>(
      argc, argv, "Rank which labels a text shows, with a model and its trained probes", inference::add_inference_flags,
      [](inference::InferenceRequest& request) {
        request.live_view = isatty(STDOUT_FILENO) != 0;
        inference::run_inference(request, std::cin, isatty(STDIN_FILENO) != 0);
      });
}
