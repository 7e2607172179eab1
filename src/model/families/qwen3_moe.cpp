// Qwen 3 MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen 3's attention (per-head q/k RMSNorm) with routed experts
// (mlp.gate, mlp.experts.{e}.{gate,up,down}_proj) on the layers assign_sparse_layers picks, a dense MLP on the
// others; norm_topk_prob renormalises the chosen weights.
#include "model/families.h"

namespace probekit::model {

void resolve_qwen3_moe(const ConfigReader& config_json, ModelConfig& c) {
  resolve_llama_common(config_json, c, {151936, 2048, 6144, 24, 32, 4, 0, 32768, 1e-6});
  c.features.qk_norm = QkNorm::kPerHead;
  c.qkv_bias = c.output_bias = config_json.read<bool>("attention_bias").value_or(false);
  c.routed_experts.experts = read_expert_count(config_json, 128);
  c.routed_experts.top_k = config_json.read<int64_t>("num_experts_per_tok").value_or(8);
  c.routed_experts.intermediate_size = config_json.read<int64_t>("moe_intermediate_size").value_or(768);
  c.routed_experts.normalize_top_k = config_json.read<bool>("norm_topk_prob").value_or(false);
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(config_json, 10000.0, c.head_dim)});
  assign_sparse_layers(config_json, c);
  resolve_qwen_windows(config_json, c);
}

void load_qwen3_moe(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                    ModelWeights& weights) {
  load_llama_layout(WeightScope(checkpoint, "model.", plan.device, plan.dtype), config, plan, weights,
                    [&](const WeightScope& layer) {
                      return load_routed_experts(layer.sub("mlp"), config, {"gate", "gate_proj", "up_proj", "down_proj"});
                    });
  load_lm_head(checkpoint, {"lm_head.weight"}, config, plan, weights);
}

}  // namespace probekit::model
