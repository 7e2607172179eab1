// Phi-3 and Phi-4-mini: Llama's decoder with fused qkv_proj and gate_up_proj weights, an optional sliding
// window on every layer, partial rotary embeddings (partial_rotary_factor) and longrope scaling (the 128k
// models: short factors up to original_max_position_embeddings tokens, long ones beyond).
#include "model/families.h"

namespace probekit::model {

void resolve_phi3(const ConfigReader& config_json, ModelConfig& c) {
  resolve_llama_common(config_json, c, {32064, 3072, 8192, 32, 32, 0, 0, 4096, 1e-5});
  // transformers: int(head_dim * partial_rotary_factor) leading dimensions of each head rotate.
  const double fraction = read_rotary_fraction(config_json, {"partial_rotary_factor"}, 1.0);
  const auto rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * fraction);
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(config_json, 10000.0, rotary_dim)});
  apply_sliding_windows(c, std::vector<bool>(c.layers.size(), true),
                        config_json.read<int64_t>("sliding_window").value_or(0));
}

void load_phi3(const Checkpoint& checkpoint, const ModelConfig& c, const LoadPlan& plan, ModelWeights& w) {
  const WeightScope model(checkpoint, "model.", plan.device, plan.dtype);
  const int64_t hidden = c.hidden_size, inner = c.intermediate_size;
  const int64_t q_out = c.num_heads * c.head_dim, kv_out = c.num_kv_heads * c.head_dim;
  w.embed_tokens = load_token_embeddings(model, "embed_tokens.weight", c, plan);
  load_layers(model.sub("layers"), plan, w, [&](const WeightScope& layer, int64_t, LayerWeights& l) {
    l.attention_input_norm = load_norm(layer, "input_layernorm", hidden, c);
    l.mlp_input_norm = load_norm(layer, "post_attention_layernorm", hidden, c);
    // qkv_proj holds q, k and v one after the other and gate_up_proj gate then up: the decoder's own layouts.
    l.qkv.weight = layer.get("self_attn.qkv_proj.weight", {q_out + 2 * kv_out, hidden});
    l.attention_output.weight = layer.get("self_attn.o_proj.weight", {hidden, q_out});
    l.feed_forward = DenseMlp{{layer.get("mlp.gate_up_proj.weight", {2 * inner, hidden}), {}},
                              {layer.get("mlp.down_proj.weight", {hidden, inner}), {}}};
  });
  if (plan.final_norm) w.final_norm = load_norm(model, "norm", hidden, c);
  load_lm_head(checkpoint, {"lm_head.weight"}, c, plan, w);
}

}  // namespace probekit::model
