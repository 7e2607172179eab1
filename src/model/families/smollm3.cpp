// SmolLM3: Llama's decoder with no rotary embedding on some layers (NoPE): no_rope_layers holds 1 for a layer
// that rotates its queries and keys and 0 for one that does not (by default every no_rope_layer_interval-th
// layer); with use_sliding_window, the NoPE layers attend within a window. Tied embeddings by default.
#include "common/error.h"
#include "model/families.h"

namespace probekit::model {

namespace {

// For each layer, whether it applies the rotary embedding.
std::vector<bool> rope_layers(const ConfigReader& config_json, int64_t num_layers) {
  std::vector<bool> uses_rope;
  Field<std::vector<int64_t>> listed = config_json.read<std::vector<int64_t>>("no_rope_layers");
  if (listed.value) {
    // SmolLM3Config asks for at least one entry per layer.
    if (static_cast<int64_t>(listed.value->size()) < num_layers) {
      fail("{} has {} entries for {} layers", config_json.where("no_rope_layers"), listed.value->size(), num_layers);
    }
    for (int64_t i = 0; i < num_layers; ++i) {
      const int64_t flag = (*listed.value)[static_cast<size_t>(i)];
      if (flag != 0 && flag != 1) fail("{} entries must be 0 or 1, got {}", config_json.where("no_rope_layers"), flag);
      uses_rope.push_back(flag == 1);
    }
    return uses_rope;
  }
  const int64_t interval = config_json.read<int64_t>("no_rope_layer_interval").value_or(4);
  if (interval <= 0) fail("{} must be positive", config_json.where("no_rope_layer_interval"));
  for (int64_t i = 0; i < num_layers; ++i) uses_rope.push_back((i + 1) % interval != 0);
  return uses_rope;
}

}  // namespace

void resolve_smollm3(const ConfigReader& config_json, ModelConfig& c) {
  resolve_llama_common(config_json, c, {128256, 2048, 11008, 36, 16, 4, 0, 32768, 1e-6, "silu", true});
  c.qkv_bias = c.output_bias = config_json.read<bool>("attention_bias").value_or(false);
  c.mlp_bias = config_json.read<bool>("mlp_bias").value_or(false);
  const RopeSpec rope = resolve_single_rope(config_json, 2e6, c.head_dim);
  const std::vector<bool> uses_rope = rope_layers(config_json, c.num_layers);
  c.layers.resize(static_cast<size_t>(c.num_layers));
  for (size_t i = 0; i < c.layers.size(); ++i) c.layers[i].rope = uses_rope[i] ? rope : RopeSpec{};
  // Without layer_types, SmolLM3Config makes the NoPE layers slide when use_sliding_window and a window are set.
  const Field<int64_t> window = config_json.read<int64_t>("sliding_window");
  std::vector<bool> sliding = sliding_from_layer_types(config_json, c.num_layers);
  if (sliding.empty() && config_json.read<bool>("use_sliding_window").value_or(false) && window.value) {
    for (bool rotates : uses_rope) sliding.push_back(!rotates);
  }
  apply_sliding_windows(c, sliding, window.value_or(0));
}

}  // namespace probekit::model
