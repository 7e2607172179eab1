// multi_probe_inference: loads a model and its trained probes and ranks which labels a text shows, for one
// text, a file of texts, an interactive session, two texts compared, or every token of a text.
#include <iostream>

#include "common/cli.h"
#include "device/gpu_utils.h"
#include "inference/session.h"

using namespace probekit;

int main(int argc, char** argv) {
  use_passive_openmp_threads(argv);
  CLI::App app{"Rank which labels a text shows, with a model and its trained probes"};
  CommonOptions common;
  add_common_options(app, common);
  inference::InferenceRequest request;
  inference::add_inference_flags(app, request);
  return run_tool(app, argc, argv, common, [&] {
    device::configure_threads(common.threads);
    inference::run_inference(request, std::cin);
  });
}
