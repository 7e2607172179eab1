// capture_activations: runs a Hugging Face checkpoint over labelled texts and stores chosen layers'
// activations in HDF5, one file per layer, resumable.
#include <fmt/format.h>

#include "capture/capture.h"
#include "capture/capture_flags.h"
#include "capture/summary.h"
#include "cli/torch/torch_tool.h"

using namespace probekit;

int main(int argc, char** argv) {
  TorchTool tool("Capture a model's activations for labelled texts (JSONL) into one HDF5 file per layer");
  tool.common.disk_full_advice = "Files already complete are kept; capture_activations continues from its last commit with --resume.";
  capture::CaptureFlags flags;
  capture::add_capture_flags(tool.app, flags);
  return tool.run(argc, argv, [&] {
    capture::CaptureOptions options = flags.resolve();
    capture::CaptureSummary summary = capture::run_capture(options);
    if (flags.json) {
      fmt::print("{}\n", dump_json(capture::summary_json(summary), 2));
    } else {
      fmt::print("{}", capture::summary_text(summary, options.max_length));
    }
  });
}
