#include "loading/model_loading.h"

#include <spdlog/spdlog.h>

#include <future>

namespace probekit::loading {

ModelSource find_model(const std::string& model_dir) {
  ModelSource source;
  source.resolved = hub::resolve_model(model_dir);
  source.config = model::load_config(source.resolved.dir);
  return source;
}

model::LoadOptions load_options(const ModelRequest& request) {
  model::LoadOptions load;
  load.fp8_block_products = request.fp8_products == "fp8";
  return load;
}

std::vector<device::ComputeTarget> select_targets(const ModelRequest& request) {
  std::vector<device::ComputeTarget> targets;
  for (const std::string& name : request.devices.empty() ? std::vector<std::string>{request.device} : request.devices) {
    targets.push_back(device::select_compute(name, request.dtype));
  }
  return targets;
}

model::DevicePlan place_model(const ModelRequest& request, const ModelSource& source,
                              const std::vector<device::ComputeTarget>& targets, const model::LoadOptions& load) {
  model::Placement placement = model::parse_placement(request.placement);
  const auto layers = static_cast<size_t>(load.last_layer < 0 ? source.config.num_layers : load.last_layer + 1);
  if (targets.size() == 1 && placement != model::Placement::kLayers) {
    return model::DevicePlan{{std::vector<size_t>(layers, 0)}, {}, "one device"};
  }
  model::LoadOptions sized = load;
  sized.dtype = targets.front().dtype;
  std::vector<int64_t> free_bytes;
  for (const device::ComputeTarget& t : targets) {
    auto free = static_cast<int64_t>(t.memory().free_bytes);  // 0 on the CPU and on MPS
    free_bytes.push_back(request.max_gpu_memory > 0 && free > 0 ? std::min(free, request.max_gpu_memory) : free);
  }
  model::DevicePlan devices =
      model::plan_devices(placement, free_bytes, model::model_bytes(source.resolved.dir, sized));
  spdlog::info("placement: {}", devices.description);
  return devices;
}

std::unique_ptr<model::TransformerModel> load_replica(const std::string& dir,
                                                      const std::vector<device::ComputeTarget>& targets,
                                                      const model::DevicePlan& placement, size_t replica,
                                                      model::LoadOptions load,
                                                      const model::WeightReadAhead* read_ahead) {
  const std::vector<size_t>& layer_devices = placement.replicas.at(replica);
  load.device = targets[layer_devices.front()].device;
  load.dtype = targets[layer_devices.front()].dtype;
  load.layer_devices.clear();
  if (layer_devices.back() != layer_devices.front()) {
    for (size_t index : layer_devices) load.layer_devices.push_back(targets[index].device);
  }
  return std::make_unique<model::TransformerModel>(model::TransformerModel::load(dir, load, read_ahead));
}

std::vector<std::unique_ptr<model::TransformerModel>> load_replicas(const std::string& dir,
                                                                    const std::vector<device::ComputeTarget>& targets,
                                                                    const model::DevicePlan& placement,
                                                                    const model::LoadOptions& load) {
  std::vector<std::future<std::unique_ptr<model::TransformerModel>>> loading;
  for (size_t r = 0; r < placement.replicas.size(); ++r) {
    loading.push_back(std::async(std::launch::async, [&, r] { return load_replica(dir, targets, placement, r, load); }));
  }
  std::vector<std::unique_ptr<model::TransformerModel>> replicas;
  for (auto& replica : loading) replicas.push_back(replica.get());
  // The weights were copied on each device's default stream; the workers compute on streams of their own.
  for (const device::ComputeTarget& t : targets) device::synchronize(t.device);
  return replicas;
}

LoadedModel load_model(const ModelRequest& request, const model::LoadOptions& load) {
  LoadedModel loaded;
  loaded.source = find_model(request.model_dir);
  loaded.targets = select_targets(request);
  model::DevicePlan placement = place_model(request, loaded.source, loaded.targets, load);
  loaded.model = load_replica(loaded.source.resolved.dir, loaded.targets, placement, 0, load);
  return loaded;
}

SharedModel load_shared_model(const ModelRequest& request) {
  SharedModel shared;
  shared.source = find_model(request.model_dir);
  const std::string& dir = shared.source.resolved.dir;
  // The tokenizer and the disk work while the devices are chosen, as Engine::load has them.
  auto tokenizer = std::async(std::launch::async, [&dir] { return tokenizer::Tokenizer::from_file(dir); });
  model::LoadOptions load = load_options(request);
  load.lm_head = true;
  model::WeightReadAhead read_ahead(dir, load);
  shared.fingerprint = read_ahead.checkpoint()->fingerprint();
  shared.targets = select_targets(request);
  shared.placement = place_model(request, shared.source, shared.targets, load);
  shared.placement.replicas.resize(1);
  shared.model = load_replica(dir, shared.targets, shared.placement, 0, load, &read_ahead);
  shared.tokenizer = std::make_shared<const tokenizer::Tokenizer>(tokenizer.get());
  return shared;
}

}  // namespace probekit::loading
