// Llama (incl. Llama 3 rope scaling) and Mistral: RMSNorm, SiLU-gated MLP, grouped-query attention.
#include "model/families.h"

namespace probekit::model {

void resolve_llama(const ConfigReader& config_json, ModelConfig& c) {
  resolve_llama_common(config_json, c, {32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6});
  c.qkv_bias = c.output_bias = config_json.read<bool>("attention_bias").value_or(false);
  c.mlp_bias = config_json.read<bool>("mlp_bias").value_or(false);
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(config_json, 10000.0, c.head_dim)});
  apply_sliding_windows(c, sliding_from_layer_types(config_json, c.num_layers),
                        config_json.read<int64_t>("sliding_window").value_or(0));
}

void resolve_mistral(const ConfigReader& config_json, ModelConfig& c) {
  resolve_llama_common(config_json, c, {32000, 4096, 14336, 32, 32, 8, 0, 131072, 1e-6});
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(config_json, 10000.0, c.head_dim)});
  // MistralConfig defaults to a 4096-token window on every layer; an explicit null turns it off.
  Field<int64_t> sliding_window = config_json.read<int64_t>("sliding_window");
  int64_t window = sliding_window.present ? sliding_window.value_or(0) : 4096;
  std::vector<bool> sliding = sliding_from_layer_types(config_json, c.num_layers);
  if (sliding.empty()) sliding.assign(static_cast<size_t>(c.num_layers), window > 0);
  apply_sliding_windows(c, sliding, window);
}

}  // namespace probekit::model
