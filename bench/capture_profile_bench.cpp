// capture_profile_bench: capture_activations with LibTorch's Kineto profiler around the capture, writing a
// Chrome trace of every CPU op and GPU kernel. bench/python/summarize_trace.py splits the GPU time it holds into
// products, attention, element-wise, copies and idle (the profile). Needs LibTorch 2.x (Kineto).
// Usage: capture_profile_bench --trace OUT.json [capture_activations flags...]
#include <fmt/format.h>

#include "capture/capture.h"
#include "capture/capture_flags.h"
#include "capture/summary.h"
#include "cli/torch/torch_tool.h"
#include "common/error.h"
#include "device/torch/gpu_utils.h"

#include "kineto_trace.h"

using namespace probekit;

int main(int argc, char** argv) {
  TorchTool tool("capture_activations under the Kineto profiler (a Chrome trace of the capture)");
  capture::CaptureFlags flags;
  capture::add_capture_flags(tool.app, flags);
  std::string trace;
  tool.app.add_option("--trace", trace, "Chrome trace to write")->required();
  return tool.run(argc, argv, [&] {
    capture::CaptureOptions options = flags.resolve();
    capture::CaptureSummary summary;
    bench::profile([&] { summary = capture::run_capture(options); }, trace);
    fmt::print("{}\n", dump_json(capture::summary_json(summary), 2));
  });
}
