#include "model/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "common/error.h"
#include "model/families.h"

namespace probekit::model {

namespace {

// The share of a device's free memory the weights may take; activations need the rest.
constexpr double kWeightShare = 0.8;

// Stage of each layer when `stages` devices share the model: consecutive layers, about equal bytes per stage
// (the first also holds the embeddings), every stage at least one layer.
std::vector<size_t> split_layers(const ModelBytes& bytes, size_t stages) {
  const size_t layers = bytes.layers.size();
  const double total =
      static_cast<double>(std::accumulate(bytes.layers.begin(), bytes.layers.end(), bytes.embeddings));
  std::vector<size_t> stage_of(layers);
  size_t stage = 0, in_stage = 0;
  auto done = static_cast<double>(bytes.embeddings);
  for (size_t l = 0; l < layers; ++l) {
    double middle = done + static_cast<double>(bytes.layers[l]) / 2;
    bool past_share = middle > total * static_cast<double>(stage + 1) / static_cast<double>(stages);
    bool later_stages_need_it = layers - l <= stages - 1 - stage;
    if (in_stage > 0 && stage + 1 < stages && (past_share || later_stages_need_it)) {
      ++stage;
      in_stage = 0;
    }
    stage_of[l] = stage;
    ++in_stage;
    done += static_cast<double>(bytes.layers[l]);
  }
  return stage_of;
}

// The bytes on each stage of a split.
std::vector<int64_t> stage_bytes(const ModelBytes& bytes, const std::vector<size_t>& stage_of, size_t stages) {
  std::vector<int64_t> on_stage(stages, 0);
  on_stage[0] = bytes.embeddings;
  for (size_t l = 0; l < stage_of.size(); ++l) on_stage[stage_of[l]] += bytes.layers[l];
  return on_stage;
}

bool fits(const std::vector<int64_t>& on_stage, const std::vector<int64_t>& free_bytes, size_t first_device) {
  for (size_t s = 0; s < on_stage.size(); ++s) {
    int64_t free = free_bytes[first_device + s];
    if (free > 0 && static_cast<double>(on_stage[s]) > kWeightShare * static_cast<double>(free)) return false;
  }
  return true;
}

// `replicas` copies of a split over `stages` devices, replica r on devices [r * stages, (r + 1) * stages).
DevicePlan replicate(const ModelBytes& bytes, const std::vector<size_t>& stage_of, size_t stages, size_t replicas) {
  DevicePlan plan;
  std::vector<int64_t> on_stage = stage_bytes(bytes, stage_of, stages);
  for (size_t r = 0; r < replicas; ++r) {
    std::vector<size_t> devices;
    for (size_t stage : stage_of) devices.push_back(r * stages + stage);
    plan.replicas.push_back(devices);
    plan.weight_bytes.insert(plan.weight_bytes.end(), on_stage.begin(), on_stage.end());
  }
  std::string layout;
  for (size_t l = 0; l < stage_of.size(); ++l) {
    if (l > 0 && stage_of[l] == stage_of[l - 1]) continue;
    size_t last = l;
    while (last + 1 < stage_of.size() && stage_of[last + 1] == stage_of[l]) ++last;
    layout += fmt::format("{}layers {}-{} on device {}", layout.empty() ? "" : ", ", l, last, stage_of[l]);
  }
  plan.description = stages == 1 ? fmt::format("{} replica{} of the whole model", replicas, replicas > 1 ? "s" : "")
                                 : fmt::format("{}; {} replica{}", layout, replicas, replicas > 1 ? "s" : "");
  return plan;
}

std::string gigabytes(int64_t bytes) { return fmt::format("{:.1f} GB", static_cast<double>(bytes) / 1e9); }

}  // namespace

Placement parse_placement(const std::string& text) {
  if (text == "auto") return Placement::kAuto;
  if (text == "replicas") return Placement::kReplicas;
  if (text == "layers") return Placement::kLayers;
  fail_usage("--placement {}: expected auto, replicas or layers", text);
}

size_t DevicePlan::stages(size_t replica) const {
  const std::vector<size_t>& devices = replicas.at(replica);
  return devices.empty() ? 1 : devices.back() - devices.front() + 1;
}

namespace {

bool ends_with(const std::string& name, const std::string& suffix) {
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// An FP8 weight's or its scales' bytes once loaded, or none for another tensor. Kept packed, as on the CUDA devices
// placement plans for: its bytes, and its scales expanded to one row per weight row in fp32 (WeightScope::get_linear),
// routed experts' too. Dequantized: its values, and no scales.
std::optional<int64_t> fp8_bytes(const Checkpoint& checkpoint, const std::string& name,
                                 const safetensors::TensorInfo& info, const LoadOptions& options) {
  const bool packed = options.keep_fp8_packed.value_or(true);
  const auto element = static_cast<int64_t>(c10::elementSize(options.dtype));
  if (info.dtype == safetensors::DType::kF8E4M3) return static_cast<int64_t>(info.numel()) * (packed ? 1 : element);
  const std::string scale = "_scale_inv";
  if (!ends_with(name, scale)) return std::nullopt;
  auto weight = checkpoint.find(name.substr(0, name.size() - scale.size()));
  if (!weight || weight->info->dtype != safetensors::DType::kF8E4M3 || info.shape.size() != 2) return std::nullopt;
  return packed ? weight->info->shape[0] * info.shape[1] * static_cast<int64_t>(sizeof(float)) : 0;
}

// A tensor's bytes once loaded. MXFP4 parts (uint8 blocks and scales) take their stored bytes when kept packed, as
// on the CUDA devices placement plans for; dequantized, each block byte becomes two values and the scales nothing.
int64_t loaded_tensor_bytes(const Checkpoint& checkpoint, const std::string& name, const safetensors::TensorInfo& info,
                            const LoadOptions& options) {
  const auto element = static_cast<int64_t>(c10::elementSize(options.dtype));
  if (std::optional<int64_t> fp8 = fp8_bytes(checkpoint, name, info, options)) return *fp8;
  if (info.dtype != safetensors::DType::kU8) return static_cast<int64_t>(info.numel()) * element;
  if (options.keep_mxfp4_packed.value_or(true)) return static_cast<int64_t>(info.numel());
  return ends_with(name, "_blocks") ? static_cast<int64_t>(info.numel()) * 2 * element : 0;
}

}  // namespace

ModelBytes model_bytes(const std::string& dir, const LoadOptions& options) {
  Checkpoint checkpoint = Checkpoint::open(dir);
  ModelConfig config = load_config(dir);
  const Family& family = *find_family(config.model_type);
  ModelBytes bytes;
  bytes.layers.assign(static_cast<size_t>(options.last_layer < 0 ? config.num_layers : options.last_layer + 1), 0);
  for (const std::string& name : tensors_to_read(dir, options)) {
    int64_t size = loaded_tensor_bytes(checkpoint, name, *checkpoint.find(name)->info, options);
    int64_t layer = family.tensor_layer(name);
    if (layer >= 0 && layer < static_cast<int64_t>(bytes.layers.size())) {
      bytes.layers[static_cast<size_t>(layer)] += size;
    } else {
      bytes.embeddings += size;
    }
  }
  return bytes;
}

DevicePlan plan_devices(Placement placement, const std::vector<int64_t>& free_bytes, const ModelBytes& bytes) {
  const size_t devices = free_bytes.size();
  if (devices == 0) fail_input("no devices to place the model on");
  if (bytes.layers.empty()) fail_input("no layers to place");
  const size_t most_stages = std::min(devices, bytes.layers.size());
  if (placement == Placement::kReplicas) return replicate(bytes, std::vector<size_t>(bytes.layers.size(), 0), 1, devices);
  if (placement == Placement::kLayers) {
    if (devices < 2) fail_usage("--placement layers splits the layers over several devices: give them with --devices");
    return replicate(bytes, split_layers(bytes, most_stages), most_stages, 1);
  }
  for (size_t stages = 1; stages <= most_stages; ++stages) {
    std::vector<size_t> stage_of = split_layers(bytes, stages);
    if (fits(stage_bytes(bytes, stage_of, stages), free_bytes, 0)) return replicate(bytes, stage_of, stages, devices / stages);
  }
  int64_t total = std::accumulate(bytes.layers.begin(), bytes.layers.end(), bytes.embeddings);
  int64_t free = std::accumulate(free_bytes.begin(), free_bytes.end(), int64_t{0});
  fail_input("the model's {} of weights (up to layer {}) do not fit {} device{} with {} free in all: with the "
             "activations they need more; add devices, capture fewer or earlier layers, or use a smaller --dtype",
             gigabytes(total), bytes.layers.size() - 1, devices, devices > 1 ? "s" : "", gigabytes(free));
}

}  // namespace probekit::model
