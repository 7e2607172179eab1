// Qwen 1.5 / 2 MoE: Qwen 2's attention (q/k/v biases) with routed experts whose chosen weights are not
// renormalised by default, plus a shared expert every token takes, scaled by sigmoid(shared_expert_gate x).
#include "model/families.h"

namespace probekit::model {

void read_qwen_shared_experts(const ConfigReader& config_json, ModelConfig& c, const QwenExpertDefaults& defaults) {
  c.routed_experts.experts = read_expert_count(config_json, defaults.experts);
  c.routed_experts.top_k = config_json.read<int64_t>("num_experts_per_tok").value_or(defaults.top_k);
  c.routed_experts.intermediate_size = config_json.read<int64_t>("moe_intermediate_size").value_or(defaults.intermediate_size);
  c.routed_experts.normalize_top_k = config_json.read<bool>("norm_topk_prob").value_or(defaults.normalize_top_k);
  c.routed_experts.shared_expert_intermediate_size =
      config_json.read<int64_t>("shared_expert_intermediate_size").value_or(defaults.shared_intermediate_size);
}

void resolve_qwen2_moe(const ConfigReader& config_json, ModelConfig& c) {
  resolve_llama_common(config_json, c, {151936, 2048, 5632, 24, 16, 16, 0, 32768, 1e-6});
  c.qkv_bias = config_json.read<bool>("qkv_bias").value_or(true);
  read_qwen_shared_experts(config_json, c, {60, 4, 1408, false, 5632});
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(config_json, 10000.0, c.head_dim)});
  assign_sparse_layers(config_json, c);
  resolve_qwen_windows(config_json, c);
}

RoutedExperts load_qwen2_moe_experts(const WeightScope& layer, const ModelConfig& config) {
  const int64_t hidden = config.hidden_size, shared_inner = config.routed_experts.shared_expert_intermediate_size;
  const WeightScope mlp = layer.sub("mlp");
  RoutedExperts experts = load_routed_experts(mlp, config, {"gate", "gate_proj", "up_proj", "down_proj"});
  experts.shared_expert = load_gated_mlp(mlp.sub("shared_expert"), hidden, shared_inner, false);
  experts.shared_expert_gate = mlp.get("shared_expert_gate.weight", {1, hidden});
  return experts;
}

void load_qwen2_moe(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                    ModelWeights& weights) {
  load_llama_layout(WeightScope(checkpoint, "model.", plan.device, plan.dtype), config, plan, weights,
                    [&](const WeightScope& layer) { return load_qwen2_moe_experts(layer, config); });
  load_lm_head(checkpoint, {"lm_head.weight"}, config, plan, weights);
}

}  // namespace probekit::model
