// capture_activations: runs a Hugging Face checkpoint over labelled texts and stores chosen layers'
// activations in HDF5, one file per layer, resumable.
#include <fmt/format.h>

#include "capture/capture.h"
#include "capture/capture_flags.h"
#include "capture/summary.h"
#include "common/cli.h"
#include "device/gpu_utils.h"

using namespace probekit;

int main(int argc, char** argv) {
  use_passive_openmp_threads(argv);
  CLI::App app{"Capture a model's activations for labelled texts (JSONL) into one HDF5 file per layer"};
  CommonOptions common;
  common.disk_full_advice = "Files already complete are kept; capture_activations continues from its last commit with --resume.";
  add_common_options(app, common);
  capture::CaptureFlags flags;
  capture::add_capture_flags(app, flags);
  return run_tool(app, argc, argv, common, [&] {
    device::configure_threads(common.threads);
    capture::CaptureOptions options = flags.resolve();
    capture::CaptureSummary summary = capture::run_capture(options);
    if (flags.json) {
      fmt::print("{}\n", dump_json(capture::summary_json(summary), 2));
    } else {
      fmt::print("{}", capture::summary_text(summary, options.max_length));
    }
  });
}
