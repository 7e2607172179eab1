// OLMo 2: Llama's weights with the norms moved after the sublayers (post_attention_layernorm and
// post_feedforward_layernorm normalize each branch before its residual add; nothing normalizes the inputs),
// and q/k RMSNorm over the whole q and k projections rather than per head.
#include "model/families.h"

namespace probekit::model {

void resolve_olmo2(const ConfigReader& config_json, ModelConfig& c) {
  resolve_llama_common(config_json, c, {50304, 4096, 11008, 32, 32, 0, 0, 2048, 1e-5});
  c.features.input_norms = false;
  c.features.attention_output_norm = c.features.mlp_output_norm = true;
  c.features.qk_norm = QkNorm::kWholeProjection;
  c.qkv_bias = c.output_bias = config_json.read<bool>("attention_bias").value_or(false);
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(config_json, 10000.0, c.head_dim)});
}

}  // namespace probekit::model
