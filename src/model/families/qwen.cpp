// Qwen 2 (q/k/v biases) and Qwen 3 (q/k RMSNorm, explicit head_dim).
#include "model/families.h"

namespace probekit::model {

void resolve_qwen2(const ConfigReader& config_json, ModelConfig& c) {
  resolve_llama_common(config_json, c, {151936, 4096, 22016, 32, 32, 32, 0, 32768, 1e-6});
  c.qkv_bias = true;
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(config_json, 10000.0, c.head_dim)});
  resolve_qwen_windows(config_json, c);
}

void resolve_qwen3(const ConfigReader& config_json, ModelConfig& c) {
  resolve_llama_common(config_json, c, {151936, 4096, 22016, 32, 32, 32, 128, 32768, 1e-6});
  c.features.qk_norm = QkNorm::kPerHead;
  c.qkv_bias = c.output_bias = config_json.read<bool>("attention_bias").value_or(false);
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(config_json, 10000.0, c.head_dim)});
  resolve_qwen_windows(config_json, c);
}

}  // namespace probekit::model
