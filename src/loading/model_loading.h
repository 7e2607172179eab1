// The one way a model gets onto its devices, in the order of llama.cpp's common_init_from_params: resolve the name
// (a folder or a hub name) -> read its config -> choose the devices and the placement -> load. Capture, inference,
// generation, inspect_model and the server call these steps; each caller may do its own work between them (a cold
// start reads the weights ahead while the device and the probes get ready).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/torch/gpu_utils.h"
#include "hub/resolve.h"
#include "model/config.h"
#include "model/placement.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace probekit::loading {

/// Which model and where it runs: what --model, --device, --dtype, --devices, --placement, --max-gpu-memory and
/// --fp8-products say.
/// The option structs of the tools that load a model (capture, inference) are made of it.
struct ModelRequest {
  std::string model_dir;             // a checkpoint folder or a hub name, org/name[@revision]
  std::string device = "auto";
  std::string dtype = "auto";
  std::vector<std::string> devices;  // several devices ("cuda:0", "cuda:1"), used as `placement` says
  std::string placement = "auto";    // auto|replicas|layers (model/placement.h)
  int64_t max_gpu_memory = 0;        // bytes a run may use on each GPU; 0: the device's free memory
  std::string fp8_products = "decoded";  // decoded|fp8: how FP8 checkpoints multiply (model::LoadOptions)
};

/// The load options `request` implies (--fp8-products); callers add the layers, norm and head they need.
model::LoadOptions load_options(const ModelRequest& request);

/// A model found and its config read: what is known before any device is touched.
struct ModelSource {
  hub::ResolvedModel resolved;  // its folder, and the name and revision results record
  model::ModelConfig config;
};

/// Step 1: resolves a folder or a hub name (downloading what the cache lacks) and reads its config.
ModelSource find_model(const std::string& model_dir);

/// Step 2: the devices of a request, with their dtype: each of --devices, or --device alone.
std::vector<device::ComputeTarget> select_targets(const ModelRequest& request);

/// Step 3: where a load of the model with `load` sits on the targets: one device, replicas, layers split over
/// several, or replicas of a split model (--placement), sized from each device's free memory (within
/// --max-gpu-memory).
model::DevicePlan place_model(const ModelRequest& request, const ModelSource& source,
                              const std::vector<device::ComputeTarget>& targets, const model::LoadOptions& load);

/// Step 4: replica `replica` of the placement, its layers on their devices, reading ahead itself unless `read_ahead`
/// (started for the same load) is given.
std::unique_ptr<model::TransformerModel> load_replica(const std::string& dir,
                                                      const std::vector<device::ComputeTarget>& targets,
                                                      const model::DevicePlan& placement, size_t replica,
                                                      model::LoadOptions load,
                                                      const model::WeightReadAhead* read_ahead = nullptr);

/// Step 4 for every replica, loaded in parallel; the devices are synchronized before it returns.
std::vector<std::unique_ptr<model::TransformerModel>> load_replicas(const std::string& dir,
                                                                    const std::vector<device::ComputeTarget>& targets,
                                                                    const model::DevicePlan& placement,
                                                                    const model::LoadOptions& load);

/// The whole path for one model copy (the placement's first replica), as inspect_model and generation run it.
struct LoadedModel {
  ModelSource source;
  std::vector<device::ComputeTarget> targets;
  std::unique_ptr<model::TransformerModel> model;
};
LoadedModel load_model(const ModelRequest& request, const model::LoadOptions& load);

/// A model loaded once and run by several callers on the same weights (the Python package's models: capture,
/// ranking, per-token scores and generation): every layer, the final norm and the LM head, on the placement's first
/// replica, with its tokenizer and the checkpoint's fingerprint (which probes record).
struct SharedModel {
  ModelSource source;
  std::vector<device::ComputeTarget> targets;
  model::DevicePlan placement;  // its replicas cut to the one loaded
  std::shared_ptr<const model::TransformerModel> model;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  std::string fingerprint;
};
SharedModel load_shared_model(const ModelRequest& request);

}  // namespace probekit::loading
