// Gemma 4 text: Gemma 3's layer (four norms, per-head q/k norms, sliding and full layers each with its rope,
// embeddings scaled by sqrt(hidden), final logit soft-capping) with plain RMSNorm weights (not 1 + w), values
// RMS-normalized without a weight, unscaled attention scores, full layers with a head_dim of their own (rotated
// by the proportional rope), and per-layer inputs: a table of one small embedding per layer plus a projection of
// the embeddings, gated into the stream after each layer's MLP, whose output is then scaled by layer_scalar.
// "gemma4" is the multimodal wrapper: its text_config is this model, its text tower sits under
// model.language_model as Gemma 3's does.
#include <string>

#include "common/error.h"
#include "model/families.h"

namespace probekit::model {

namespace {

// Options of Gemma4TextConfig the runtime does not implement: a config that turns one on is refused by name.
void refuse_unread_options(const ConfigReader& config_json) {
  if (config_json.read<int64_t>("num_kv_shared_layers").value_or(0) != 0) {
    fail("{} is set: layers that reuse an earlier layer's keys and values (Gemma 4 E2B/E4B) are not supported",
         config_json.where("num_kv_shared_layers"));
  }
  struct Option {
    const char* key;
    const char* what;
  };
  constexpr Option kUnread[] = {
      {"attention_k_eq_v", "full layers whose values are their keys"},
      {"enable_moe_block", "the mixture-of-experts block beside the MLP"},
      {"use_double_wide_mlp", "the double-wide MLP of the layers sharing keys and values"},
  };
  for (const Option& option : kUnread) {
    if (config_json.read<bool>(option.key).value_or(false)) {
      fail("{} is true: {} is not supported", config_json.where(option.key), option.what);
    }
  }
  if (config_json.read<std::string>("use_bidirectional_attention").value) {
    fail("{} is set: only causal attention is supported", config_json.where("use_bidirectional_attention"));
  }
}

// Sliding layers from layer_types, else five of every six; the last layer always attends fully (as
// Gemma4TextConfig forces it).
std::vector<bool> gemma4_sliding_layers(const ConfigReader& config_json, int64_t num_layers) {
  std::vector<bool> sliding = sliding_from_layer_types(config_json, num_layers);
  if (sliding.empty()) {
    for (int64_t i = 0; i < num_layers; ++i) sliding.push_back((i + 1) % 6 != 0);
  }
  sliding.back() = false;
  return sliding;
}

// Each full layer's head_dim and key/value heads: per_layer_config {"<layer>": {"head_dim": .., ...}} (the newer
// layout), else global_head_dim (512 by default) on every full layer.
void apply_layer_shapes(const ConfigReader& config_json, const std::vector<bool>& sliding, ModelConfig& c) {
  Field<ConfigReader> per_layer = config_json.read<ConfigReader>("per_layer_config");
  const int64_t global_head_dim = config_json.read<int64_t>("global_head_dim").value_or(512);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerSpec& layer = c.layers[static_cast<size_t>(i)];
    if (!per_layer.value) {
      if (!sliding[static_cast<size_t>(i)]) layer.head_dim = global_head_dim;
      continue;
    }
    const std::string index = std::to_string(i);
    Field<ConfigReader> own = per_layer.value->read<ConfigReader>(index.c_str());
    if (!own.value) continue;
    layer.head_dim = own.value->read<int64_t>("head_dim").value_or(0);
    layer.num_kv_heads = own.value->read<int64_t>("num_key_value_heads").value_or(0);
    if (layer.head_dim < 0 || layer.head_dim % 2 != 0 || layer.num_kv_heads < 0 ||
        (layer.num_kv_heads > 0 && c.num_heads % layer.num_kv_heads != 0)) {
      fail("{}: layer {}'s head_dim {} must be even and its num_key_value_heads {} divide the {} heads",
           config_json.where("per_layer_config"), i, layer.head_dim, layer.num_kv_heads, c.num_heads);
    }
  }
}

// The rope of each layer type over that type's heads; without rope_parameters, Gemma4TextConfig's defaults
// (sliding: default, theta 1e4; full: proportional over a quarter of the frequencies, theta 1e6).
void apply_ropes(const ConfigReader& config_json, const std::vector<bool>& sliding, ModelConfig& c) {
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const bool slides = sliding[static_cast<size_t>(i)];
    const int64_t head_dim = layer_head_dim(c, i);
    RopeSpec& rope = c.layers[static_cast<size_t>(i)].rope;
    if (rope_parameters_per_layer_type(config_json)) {
      const ConfigReader per_type = *config_json.read<ConfigReader>("rope_parameters").value;
      const char* key = slides ? "sliding_attention" : "full_attention";
      rope = make_rope(read_rope(per_type, key), slides ? 1e4 : 1e6, head_dim, per_type, key);
    } else if (config_json.has("rope_parameters")) {
      fail("{} must hold one rope per layer type (full_attention, sliding_attention)",
           config_json.where("rope_parameters"));
    } else {
      rope = make_rope({}, slides ? 1e4 : 1e6, head_dim, config_json, "rope_parameters");
      if (!slides) {
        rope.type = RopeType::kProportional;
        rope.rotated_fraction = 0.25;
      }
    }
  }
}

void resolve_per_layer_inputs(const ConfigReader& config_json, ModelConfig& c) {
  c.per_layer_input_size = config_json.read<int64_t>("hidden_size_per_layer_input").value_or(256);
  c.per_layer_input_vocab = config_json.read<int64_t>("vocab_size_per_layer_input").value_or(262144);
  if (c.per_layer_input_size < 0 || (c.per_layer_input_size > 0 && c.per_layer_input_vocab <= 0)) {
    fail("{}: hidden_size_per_layer_input {} and vocab_size_per_layer_input {} must be positive",
         config_json.source(), c.per_layer_input_size, c.per_layer_input_vocab);
  }
}

// The text tower under `model` ("model." or the wrapper's "model.language_model."): the Llama-style layers plus
// each layer's per-layer-input weights and layer_scalar, and the per-layer input tables.
void load_gemma4_layout(const WeightScope& model, const ModelConfig& c, const LoadPlan& plan, ModelWeights& w) {
  w.embed_tokens = load_token_embeddings(model, "embed_tokens.weight", c, plan);
  const int64_t hidden = c.hidden_size, size = c.per_layer_input_size;
  load_layers(model.sub("layers"), plan, w, [&](const WeightScope& layer, int64_t i, LayerWeights& l) {
    load_llama_layer(layer, c, i, l);
    l.layer_scalar = layer.get("layer_scalar", {1}, at::kFloat);
    if (size == 0) return;
    l.per_layer_input_gate.weight = layer.get("per_layer_input_gate.weight", {size, hidden});
    l.per_layer_projection.weight = layer.get("per_layer_projection.weight", {hidden, size});
    l.post_per_layer_input_norm = load_norm(layer, "post_per_layer_input_norm", hidden, c);
  });
  if (size > 0) {
    w.embed_tokens_per_layer = model.get("embed_tokens_per_layer.weight", {c.per_layer_input_vocab, c.num_layers * size});
    w.per_layer_model_projection = model.get("per_layer_model_projection.weight", {c.num_layers * size, hidden});
    w.per_layer_projection_norm = load_norm(model, "per_layer_projection_norm", size, c);
  }
  if (plan.final_norm) w.final_norm = load_norm(model, "norm", hidden, c);
}

}  // namespace

void resolve_gemma4_text(const ConfigReader& config_json, ModelConfig& c) {
  refuse_unread_options(config_json);
  resolve_llama_common(config_json, c,
                       {262144, 2304, 9216, 30, 8, 4, 256, 131072, 1e-6, "gelu_pytorch_tanh", true, "hidden_activation"});
  c.features.scale_embeddings = true;
  c.features.attention_output_norm = c.features.mlp_output_norm = true;
  c.features.qk_norm = QkNorm::kPerHead;
  c.features.value_norm = true;
  c.attention_scale = 1.0;  // the q/k norms set the scores' scale
  c.qkv_bias = c.output_bias = config_json.read<bool>("attention_bias").value_or(false);
  Field<double> logit_softcap = config_json.read<double>("final_logit_softcapping");
  if (logit_softcap.value) c.final_logit_softcap = *logit_softcap.value;
  resolve_per_layer_inputs(config_json, c);
  const std::vector<bool> sliding = gemma4_sliding_layers(config_json, c.num_layers);
  c.layers.resize(static_cast<size_t>(c.num_layers));
  apply_layer_shapes(config_json, sliding, c);
  apply_ropes(config_json, sliding, c);
  apply_sliding_windows(c, sliding, config_json.read<int64_t>("sliding_window").value_or(512));
}

void resolve_gemma4(const ConfigReader& config_json, ModelConfig& c) {
  Field<ConfigReader> text_config = config_json.read<ConfigReader>("text_config");
  if (!text_config.value) fail("{}: model_type 'gemma4' needs a 'text_config'", config_json.source());
  resolve_gemma4_text(text_config.value->with_source(config_json.source() + " (text_config)"), c);
  c.text_model_type = "gemma4_text";
}

void load_gemma4_text(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                      ModelWeights& weights) {
  load_gemma4_layout(WeightScope(checkpoint, "model.", plan.device, plan.dtype), config, plan, weights);
  load_lm_head(checkpoint, {"lm_head.weight"}, config, plan, weights);
}

void load_gemma4_multimodal(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                            ModelWeights& weights) {
  for (const char* prefix : {"model.language_model.", "language_model.model."}) {
    if (checkpoint.find(std::string(prefix) + "embed_tokens.weight")) {
      load_gemma4_layout(WeightScope(checkpoint, prefix, plan.device, plan.dtype), config, plan, weights);
      load_lm_head(checkpoint, {"lm_head.weight", "language_model.lm_head.weight"}, config, plan, weights);
      return;
    }
  }
  fail("{}: no text-tower weights (expected model.language_model.embed_tokens.weight)", checkpoint.describe_files());
}

}  // namespace probekit::model
