#include "cli/torch/torch_tool.h"

#include "device/torch/gpu_utils.h"

namespace probekit {

int TorchTool::run(int argc, char** argv, const std::function<void()>& body) {
  return ToolCommandLine::run(argc, argv, [&] {
    threads_ = device::configure_threads(common.threads);
    body();
  });
}

}  // namespace probekit
