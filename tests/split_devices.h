// A model's layers split over two "devices" on a machine without GPUs, for the tests of split models.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace probekit::testing {

/// The layer devices of a model of `layers` layers whose middle third (at least one layer) sits on cpu:0, the
/// rest on cpu. cpu:0 is another device than cpu to the forward pass (a CPU tensor reports plain cpu), so at
/// each layer on it the hidden state, the positions and the attention context (rotary tables, masks, the
/// generation cache's use) are moved and made again as at a stage boundary between GPUs.
inline std::vector<at::Device> cpu_split_devices(int64_t layers) {
  const int64_t first = layers / 3, end = std::max(first + 1, 2 * layers / 3);
  std::vector<at::Device> devices;
  for (int64_t l = 0; l < layers; ++l) {
    devices.push_back(l >= first && l < end ? at::Device(at::kCPU, 0) : at::Device(at::kCPU));
  }
  return devices;
}

}  // namespace probekit::testing
