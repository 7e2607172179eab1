#include "cli/torch/torch_tool.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "device/torch/gpu_utils.h"

namespace probekit {

int TorchTool::run(int argc, char** argv, const std::function<void()>& body) {
  const int code = ToolCommandLine::run(argc, argv, [&] {
    threads_ = device::configure_threads(common.threads);
    body();
  });
  // Everything the tool made went with body's scope, its files closed. What exit would still do is the libraries'
  // own teardown (LibTorch's static state, CUDA's modules and context: 0.15-0.2 s at the end of a GPU run), which
  // the system does faster as the process ends: the output is flushed and the process ends here.
  spdlog::debug("exiting with code {}", code);
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& logger) { logger->flush(); });
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace probekit
