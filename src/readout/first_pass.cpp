#include "readout/first_pass.h"

#include <c10/core/DeviceGuard.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "device/torch/gpu_utils.h"
#include "model/site_layers.h"

namespace probekit::readout {

namespace {

constexpr int64_t kRehearsalTokens = 32;

void rehearse(const std::string& dir, model::LoadOptions load, Request request,
              const std::function<void(const at::Tensor&)>& use_rows) {
  const auto start = std::chrono::steady_clock::now();
  c10::DeviceGuard guard(load.device);
  load.last_layer = 0;
  load.final_norm = false;
  load.lm_head = false;
  // The table stays in the memory map: a few rows gathered on the host, not a second copy of it on the device.
  load.embeddings_on_host = true;
  load.layer_devices.clear();
  const model::TransformerModel stand_in = model::TransformerModel::load(dir, load);
  const model::ModelConfig& config = stand_in.config();
  const std::vector<int64_t> having = model::layers_having(request.site, config);
  if (request.latents != nullptr || std::find(having.begin(), having.end(), 0) == having.end()) {
    request.site = Site::kResidPost;
  }
  request.layers = {0};
  request.writes = nullptr;
  request.latents = nullptr;
  Sequence tokens(kRehearsalTokens);
  for (int64_t i = 0; i < kRehearsalTokens; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>(i % config.vocab_size);
  const at::Tensor rows = read_rows(stand_in, {tokens}, request);
  if (use_rows) use_rows(rows);
  device::synchronize(load.device);
  spdlog::debug("first pass rehearsed on layer 0 beside the load in {:.2f} s",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

std::future<void> rehearse_first_pass(const std::string& dir, model::LoadOptions load, Request request,
                                      std::function<void(const at::Tensor&)> use_rows) {
  return std::async(std::launch::async, [dir, load = std::move(load), request, use_rows = std::move(use_rows)]() {
    try {
      rehearse(dir, load, request, use_rows);
    } catch (const std::exception& e) {
      spdlog::debug("the first pass's rehearsal failed ({}): the first text pays its set-up", e.what());
    }
  });
}

}  // namespace probekit::readout
