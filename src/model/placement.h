// How a run places a model on its devices: a whole replica on each (data parallel), consecutive layers split
// over several like transformers' device_map="auto" (a model bigger than one GPU), or replicas of a split model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/transformer.h"

namespace probekit::model {

enum class Placement { kAuto, kReplicas, kLayers };

/// Parses --placement auto|replicas|layers; a usage error otherwise.
Placement parse_placement(const std::string& text);

/// Bytes a load puts on its devices: what sits before the first layer (token and position embeddings) and each
/// decoder layer up to the last one loaded.
struct ModelBytes {
  int64_t embeddings = 0;
  std::vector<int64_t> layers;
};

/// The bytes of a load with `options`, from the checkpoint's tensor sizes converted to `options.dtype` (MXFP4
/// parts as stored when kept packed, else decoded).
ModelBytes model_bytes(const std::string& dir, const LoadOptions& options);

/// The devices of a run's model copies: for each replica, the index (into the run's devices) of each layer's
/// device; a replica on one device has every layer on it.
struct DevicePlan {
  std::vector<std::vector<size_t>> replicas;
  std::vector<int64_t> weight_bytes;  // the weights each of the run's devices holds
  std::string description;  // for the log: "layers 0-16 on device 0, 17-33 on device 1; 2 replicas"
  /// Devices one replica spans (its pipeline stages).
  size_t stages(size_t replica) const;
};

/// Places a model of `bytes` on `free_bytes.size()` devices with that much free memory each (0: unknown, as on
/// the CPU, taken as enough). kReplicas: one replica per device. kLayers: one replica split over all of them.
/// kAuto: replicas when the model fits one device (its weights within 80% of the free memory, the rest left
/// to activations), else split over as few devices as it fits, as many such replicas as there are devices for.
/// Each stage gets consecutive layers of about equal bytes (the first also the embeddings). Throws when the
/// model fits no split of these devices.
DevicePlan plan_devices(Placement placement, const std::vector<int64_t>& free_bytes, const ModelBytes& bytes);

}  // namespace probekit::model
