// Gemma 1/2/3: (1 + w) RMSNorm in fp32, tanh-GELU gated MLP, embeddings scaled by sqrt(hidden); Gemma 2 adds
// post-norms, attention soft-capping and query_pre_attn_scalar; Gemma 3 adds q/k norms and separate rope bases
// for sliding and global layers; "gemma3" is the multimodal wrapper whose text_config is a Gemma 3 text model.
#include <cmath>

#include "common/error.h"
#include "model/families.h"

namespace probekit::model {

namespace {

void resolve_gemma_common(const ConfigReader& config_json, ModelConfig& c, DimensionDefaults defaults) {
  // Gemma uses hidden_activation; older configs carry hidden_act "gelu" that the reference ignores.
  defaults.activation_key = "hidden_activation";
  defaults.activation = "gelu_pytorch_tanh";
  defaults.tie_word_embeddings = true;
  resolve_llama_common(config_json, c, defaults);
  c.features.norm_adds_one = true;
  c.features.scale_embeddings = true;
  c.qkv_bias = c.output_bias = config_json.read<bool>("attention_bias").value_or(false);
}

void resolve_gemma2_common(const ConfigReader& config_json, ModelConfig& c) {
  c.features.attention_output_norm = true;
  c.features.mlp_output_norm = true;
  c.attention_scale = 1.0 / std::sqrt(config_json.read<double>("query_pre_attn_scalar").value_or(256.0));
}

// Without layer_types, every sliding_window_pattern-th layer is global, the others slide.
std::vector<bool> gemma3_sliding_layers(const ConfigReader& config_json, int64_t num_layers) {
  std::vector<bool> sliding = sliding_from_layer_types(config_json, num_layers);
  if (!sliding.empty()) return sliding;
  Field<int64_t> pattern = config_json.read<int64_t>("sliding_window_pattern");
  if (!pattern.value) pattern = config_json.read<int64_t>("_sliding_window_pattern");
  int64_t every = pattern.value_or(6);
  if (every <= 0) fail("{}: 'sliding_window_pattern' must be positive", config_json.source());
  for (int64_t i = 0; i < num_layers; ++i) sliding.push_back((i + 1) % every != 0);
  return sliding;
}

}  // namespace

void resolve_gemma(const ConfigReader& config_json, ModelConfig& c) {
  resolve_gemma_common(config_json, c, {256000, 3072, 24576, 28, 16, 16, 256, 8192, 1e-6});
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(config_json, 10000.0, c.head_dim)});
}

void resolve_gemma2(const ConfigReader& config_json, ModelConfig& c) {
  resolve_gemma_common(config_json, c, {256000, 2304, 9216, 26, 8, 4, 256, 8192, 1e-6});
  resolve_gemma2_common(config_json, c);
  // Absent means the config class default (50); an explicit null turns soft-capping off.
  Field<double> softcap = config_json.read<double>("attn_logit_softcapping");
  if (!softcap.present) {
    c.features.attn_softcap = 50.0;
  } else if (softcap.value) {
    c.features.attn_softcap = *softcap.value;
  }
  // The same for the logits: Gemma2Config's default is 30.
  Field<double> logit_softcap = config_json.read<double>("final_logit_softcapping");
  if (!logit_softcap.present) {
    c.final_logit_softcap = 30.0;
  } else if (logit_softcap.value) {
    c.final_logit_softcap = *logit_softcap.value;
  }
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(config_json, 10000.0, c.head_dim)});
  std::vector<bool> sliding = sliding_from_layer_types(config_json, c.num_layers);
  if (sliding.empty()) {
    for (int64_t i = 0; i < c.num_layers; ++i) sliding.push_back(i % 2 == 0);
  }
  apply_sliding_windows(c, sliding, config_json.read<int64_t>("sliding_window").value_or(4096));
}

void resolve_gemma3_text(const ConfigReader& config_json, ModelConfig& c) {
  resolve_gemma_common(config_json, c, {262208, 2304, 9216, 26, 8, 4, 256, 131072, 1e-6});
  resolve_gemma2_common(config_json, c);
  c.features.qk_norm = QkNorm::kPerHead;
  Field<double> softcap = config_json.read<double>("attn_logit_softcapping");
  if (softcap.value) c.features.attn_softcap = *softcap.value;
  Field<double> logit_softcap = config_json.read<double>("final_logit_softcapping");
  if (logit_softcap.value) c.final_logit_softcap = *logit_softcap.value;
  // The older layout gives the local layers rope_local_base_freq.
  const LayerTypeRopes ropes = resolve_layer_type_ropes(config_json, c.head_dim, 1e6,
                                                        config_json.read<double>("rope_local_base_freq").value_or(1e4));
  std::vector<bool> sliding = gemma3_sliding_layers(config_json, c.num_layers);
  c.layers.resize(static_cast<size_t>(c.num_layers));
  for (size_t i = 0; i < c.layers.size(); ++i) c.layers[i].rope = sliding[i] ? ropes.sliding : ropes.full;
  apply_sliding_windows(c, sliding, config_json.read<int64_t>("sliding_window").value_or(4096));
}

void resolve_gemma3(const ConfigReader& config_json, ModelConfig& c) {
  Field<ConfigReader> text_config = config_json.read<ConfigReader>("text_config");
  if (!text_config.value) fail("{}: model_type 'gemma3' needs a 'text_config'", config_json.source());
  resolve_gemma3_text(text_config.value->with_source(config_json.source() + " (text_config)"), c);
  c.text_model_type = "gemma3_text";
}

int64_t gemma3_multimodal_tensor_layer(const std::string& name) {
  for (std::string_view tower : {"model.language_model.", "language_model.model."}) {
    if (name.compare(0, tower.size(), tower) == 0) return layer_by_prefix(name.substr(tower.size()), {"layers."}, {});
  }
  for (std::string_view head : {"lm_head.", "language_model.lm_head."}) {
    if (name.compare(0, head.size(), head) == 0) return kLmHeadTensor;
  }
  return kUnusedTensor;  // the vision tower and the projector
}

void load_gemma3_multimodal(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                            ModelWeights& weights) {
  // transformers 5 saves the text tower under model.language_model.*, the published checkpoints under
  // language_model.model.*; the vision tower is never read.
  for (const char* prefix : {"model.language_model.", "language_model.model."}) {
    if (checkpoint.find(std::string(prefix) + "embed_tokens.weight")) {
      load_llama_layout(WeightScope(checkpoint, prefix, plan.device, plan.dtype), config, plan, weights);
      // transformers 5 saves an untied head as lm_head.weight, the published checkpoints as language_model.lm_head.
      load_lm_head(checkpoint, {"lm_head.weight", "language_model.lm_head.weight"}, config, plan, weights);
      return;
    }
  }
  fail("{}: no text-tower weights (expected model.language_model.embed_tokens.weight or "
       "language_model.model.embed_tokens.weight)",
       checkpoint.describe_files());
}

}  // namespace probekit::model
