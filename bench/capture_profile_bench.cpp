// capture_profile_bench: capture_activations with LibTorch's Kineto profiler around the capture, writing a
// Chrome trace of every CPU op and GPU kernel. bench/python/summarize_trace.py splits the GPU time it holds into
// products, attention, element-wise, copies and idle (the profile). Needs LibTorch 2.x (Kineto).
// Usage: capture_profile_bench --trace OUT.json [capture_activations flags...]
#include <fmt/format.h>

#include <torch/version.h>

#include "capture/capture.h"
#include "capture/capture_flags.h"
#include "capture/summary.h"
#include "cli/torch/torch_tool.h"
#include "common/error.h"
#include "device/torch/gpu_utils.h"

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

using namespace probekit;

namespace {

#if TORCH_VERSION_MAJOR >= 2
void profile(const std::function<void()>& body, const std::string& trace) {
  namespace profiler = torch::autograd::profiler;
  torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  std::set<torch::profiler::impl::ActivityType> activities{torch::profiler::impl::ActivityType::CPU,
                                                           torch::profiler::impl::ActivityType::CUDA};
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  try {
    body();
  } catch (...) {
    profiler::disableProfiler();  // the profiler must be stopped before the process ends
    throw;
  }
  profiler::disableProfiler()->save(trace);
}
#else
void profile(const std::function<void()>&, const std::string&) {
  throw UsageError("capture_profile_bench needs LibTorch 2.x (Kineto); this build has " TORCH_VERSION);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  TorchTool tool(argv, "capture_activations under the Kineto profiler (a Chrome trace of the capture)");
  capture::CaptureFlags flags;
  capture::add_capture_flags(tool.app, flags);
  std::string trace;
  tool.app.add_option("--trace", trace, "Chrome trace to write")->required();
  return tool.run(argc, argv, [&] {
    capture::CaptureOptions options = flags.resolve();
    capture::CaptureSummary summary;
    profile([&] { summary = capture::run_capture(options); }, trace);
    fmt::print("{}\n", dump_json(capture::summary_json(summary), 2));
  });
}
