// Qwen3.5: Qwen3-Next's hybrid of Gated DeltaNet and gated full-attention layers (families/qwen3_next.cpp) with a
// dense MLP, its linear-attention projections stored apart (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a). The
// published checkpoints are multimodal (model_type qwen3_5): the text model under model.language_model.*, read
// alone; the vision tower and the multi-token-prediction head are never read.
#include <string>

#include "common/error.h"
#include "model/families.h"

namespace probekit::model {

namespace {

Linear qwen3_5_in_proj(const WeightScope& linear, const LinearAttentionSpec& s, int64_t hidden) {
  return linear.get_linear(
      {{"in_proj_qkv", s.conv_channels()}, {"in_proj_z", s.value_dim()}, {"in_proj_b", s.value_heads}, {"in_proj_a", s.value_heads}},
      hidden);
}

}  // namespace

void resolve_qwen3_5_text(const ConfigReader& config_json, ModelConfig& c) {
  resolve_gated_delta_net_hybrid(config_json, c, {248320, 4096, 12288, 32, 16, 4, 256, 32768, 1e-6});
}

void resolve_qwen3_5(const ConfigReader& config_json, ModelConfig& c) {
  Field<ConfigReader> text_config = config_json.read<ConfigReader>("text_config");
  if (!text_config.value) fail("{}: model_type 'qwen3_5' needs a 'text_config'", config_json.source());
  resolve_qwen3_5_text(text_config.value->with_source(config_json.source() + " (text_config)"), c);
  c.text_model_type = "qwen3_5_text";
  // The wrapper's own tie_word_embeddings is the one transformers applies.
  c.tie_word_embeddings = read_tie_word_embeddings(config_json, c.tie_word_embeddings);
}

void load_qwen3_5_text(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                       ModelWeights& weights) {
  load_gated_delta_net_layout(WeightScope(checkpoint, "model.", plan.device, plan.dtype), config, plan, weights,
                              qwen3_5_in_proj);
  load_lm_head(checkpoint, {"lm_head.weight"}, config, plan, weights);
}

void load_qwen3_5_multimodal(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                             ModelWeights& weights) {
  for (const char* prefix : {"model.language_model.", "language_model.model."}) {
    if (checkpoint.find(std::string(prefix) + "embed_tokens.weight")) {
      load_gated_delta_net_layout(WeightScope(checkpoint, prefix, plan.device, plan.dtype), config, plan, weights,
                                  qwen3_5_in_proj);
      load_lm_head(checkpoint, {"lm_head.weight", "language_model.lm_head.weight"}, config, plan, weights);
      return;
    }
  }
  fail("{}: no text-tower weights (expected model.language_model.embed_tokens.weight)", checkpoint.describe_files());
}

}  // namespace probekit::model
