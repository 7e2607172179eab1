// Mixtral: Mistral's attention with routed experts on every layer (block_sparse_moe: a router over
// num_local_experts SiLU-gated experts w1/w3/w2, the top num_experts_per_tok renormalised to sum to 1).
#include "model/families.h"

namespace probekit::model {

void resolve_mixtral(const ConfigReader& config_json, ModelConfig& c) {
  resolve_llama_common(config_json, c, {32000, 4096, 14336, 32, 32, 8, 0, 131072, 1e-5});
  c.routed_experts.experts = read_expert_count(config_json, 8);
  c.routed_experts.top_k = config_json.read<int64_t>("num_experts_per_tok").value_or(2);
  c.routed_experts.intermediate_size = c.intermediate_size;
  c.routed_experts.normalize_top_k = true;
  c.layers.assign(static_cast<size_t>(c.num_layers),
                  LayerSpec{0, resolve_single_rope(config_json, 1e6, c.head_dim), FeedForward::kRoutedExperts});
  // MixtralConfig has no window by default; one that is set applies to every layer.
  apply_sliding_windows(c, std::vector<bool>(c.layers.size(), true),
                        config_json.read<int64_t>("sliding_window").value_or(0));
}

void load_mixtral(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights) {
  load_llama_layout(WeightScope(checkpoint, "model.", plan.device, plan.dtype), config, plan, weights,
                    [&](const WeightScope& layer) {
                      return load_routed_experts(layer.sub("block_sparse_moe"), config, {"gate", "w1", "w3", "w2"});
                    });
  load_lm_head(checkpoint, {"lm_head.weight"}, config, plan, weights);
}

}  // namespace probekit::model
