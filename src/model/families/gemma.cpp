// Gemma 1/2/3: (1 + w) RMSNorm in fp32, tanh-GELU gated MLP, embeddings scaled by sqrt(hidden); Gemma 2 adds
// post-norms, attention soft-capping and query_pre_attn_scalar; Gemma 3 adds q/k norms and separate rope bases
// for sliding and global layers; "gemma3" is the multimodal wrapper whose text_config is a Gemma 3 text model.
#include <cmath>

#include "common/error.h"
#include "model/families.h"

namespace probekit::model {

namespace {

void resolve_gemma_common(const RawConfig& raw, ModelConfig& c, const DimensionDefaults& defaults) {
  resolve_llama_dimensions(raw, c, defaults);
  c.features.norm_adds_one = true;
  c.features.scale_embeddings = true;
  // Gemma uses hidden_activation; older configs carry hidden_act "gelu" that the reference ignores.
  c.features.activation =
      parse_activation(raw.hidden_activation.value_or("gelu_pytorch_tanh"), raw, "hidden_activation");
  c.qkv_bias = c.output_bias = raw.attention_bias.value_or(false);
}

void resolve_gemma2_common(const RawConfig& raw, ModelConfig& c) {
  c.features.attention_output_norm = true;
  c.features.mlp_output_norm = true;
  c.attention_scale = 1.0 / std::sqrt(raw.query_pre_attn_scalar.value_or(256.0));
}

}  // namespace

void resolve_gemma(const RawConfig& raw, ModelConfig& c) {
  resolve_gemma_common(raw, c, {256000, 3072, 24576, 28, 16, 16, 256, 8192, 1e-6});
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(raw, 10000.0, c.head_dim)});
}

void resolve_gemma2(const RawConfig& raw, ModelConfig& c) {
  resolve_gemma_common(raw, c, {256000, 2304, 9216, 26, 8, 4, 256, 8192, 1e-6});
  resolve_gemma2_common(raw, c);
  // Absent means the config class default (50); an explicit null turns soft-capping off.
  if (!raw.attn_logit_softcapping.present) {
    c.features.attn_softcap = 50.0;
  } else if (raw.attn_logit_softcapping.value) {
    c.features.attn_softcap = *raw.attn_logit_softcapping.value;
  }
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_single_rope(raw, 10000.0, c.head_dim)});
  std::vector<bool> sliding = sliding_from_layer_types(raw, c.num_layers);
  if (sliding.empty()) {
    for (int64_t i = 0; i < c.num_layers; ++i) sliding.push_back(i % 2 == 0);
  }
  apply_sliding_windows(c, sliding, raw.sliding_window.value_or(4096));
}

void resolve_gemma3_text(const RawConfig& raw, ModelConfig& c) {
  resolve_gemma_common(raw, c, {262208, 2304, 9216, 26, 8, 4, 256, 131072, 1e-6});
  resolve_gemma2_common(raw, c);
  c.features.qk_norm = true;
  if (raw.attn_logit_softcapping.value) c.features.attn_softcap = *raw.attn_logit_softcapping.value;

  RopeSpec global, local;
  if (raw.rope_parameters_full_attention.present || raw.rope_parameters_sliding_attention.present) {
    global = make_rope(raw.rope_parameters_full_attention, 1e6, c.head_dim, raw, "rope_parameters.full_attention");
    local = make_rope(raw.rope_parameters_sliding_attention, 1e4, c.head_dim, raw, "rope_parameters.sliding_attention");
  } else {
    // The older layout: rope_scaling applies to the global layers only; local layers use rope_local_base_freq.
    global = resolve_single_rope(raw, 1e6, c.head_dim);
    local = make_rope({}, raw.rope_local_base_freq.value_or(1e4), c.head_dim, raw, "rope_local_base_freq");
  }
  std::vector<bool> sliding = sliding_from_layer_types(raw, c.num_layers);
  if (sliding.empty()) {
    int64_t pattern = raw.sliding_window_pattern.value_or(6);
    if (pattern <= 0) fail("{}: 'sliding_window_pattern' must be positive", raw.source);
    for (int64_t i = 0; i < c.num_layers; ++i) sliding.push_back((i + 1) % pattern != 0);
  }
  c.layers.resize(static_cast<size_t>(c.num_layers));
  for (size_t i = 0; i < c.layers.size(); ++i) c.layers[i].rope = sliding[i] ? local : global;
  apply_sliding_windows(c, sliding, raw.sliding_window.value_or(4096));
}

void resolve_gemma3(const RawConfig& raw, ModelConfig& c) {
  if (raw.text_config.empty()) fail("{}: model_type 'gemma3' needs a 'text_config'", raw.source);
  resolve_gemma3_text(raw.text_config[0], c);
  c.text_model_type = "gemma3_text";
}

int64_t gemma3_multimodal_tensor_layer(const std::string& name) {
  for (std::string_view tower : {"model.language_model.", "language_model.model."}) {
    if (name.compare(0, tower.size(), tower) == 0) return layer_by_prefix(name.substr(tower.size()), {"layers."}, {});
  }
  return kUnusedTensor;  // the vision tower, the projector and the LM head
}

void load_gemma3_multimodal(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                            ModelWeights& weights) {
  // transformers 5 saves the text tower under model.language_model.*, the published checkpoints under
  // language_model.model.*; the vision tower is never read.
  for (const char* prefix : {"model.language_model.", "language_model.model."}) {
    if (checkpoint.find(std::string(prefix) + "embed_tokens.weight")) {
      load_llama_layout(WeightScope(checkpoint, prefix, plan.device, plan.dtype), config, plan, weights);
      return;
    }
  }
  fail("{}: no text-tower weights (expected model.language_model.embed_tokens.weight or "
       "language_model.model.embed_tokens.weight)",
       checkpoint.describe_files());
}

}  // namespace probekit::model
