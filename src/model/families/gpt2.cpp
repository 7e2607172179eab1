// GPT-2: LayerNorm, learned absolute positions, GELU (tanh) MLP, Conv1D weights stored as [in, out] that are
// transposed at load time; published checkpoints name weights without the `transformer.` prefix that
// transformers' GPT2LMHeadModel saves, so both are accepted.
#include <cmath>

#include "common/error.h"
#include "model/families.h"

namespace probekit::model {

void resolve_gpt2(const ConfigReader& config_json, ModelConfig& c) {
  // GPT2Config's own key names win over the standard ones it also accepts (n_embd over hidden_size, ...).
  auto read = [&](const char* key, const char* standard_key, int64_t fallback) {
    return config_json.read<int64_t>(key).value_or(config_json.read<int64_t>(standard_key).value_or(fallback));
  };
  c.vocab_size = config_json.read<int64_t>("vocab_size").value_or(50257);
  c.hidden_size = read("n_embd", "hidden_size", 768);
  c.num_layers = read("n_layer", "num_hidden_layers", 12);
  c.num_heads = read("n_head", "num_attention_heads", 12);
  c.num_kv_heads = c.num_heads;
  check_core_dimensions(c, config_json.source());
  if (c.hidden_size % c.num_heads != 0) {
    fail("{}: n_embd {} is not divisible by n_head {}", config_json.source(), c.hidden_size, c.num_heads);
  }
  c.head_dim = c.hidden_size / c.num_heads;
  c.intermediate_size = config_json.read<int64_t>("n_inner").value_or(4 * c.hidden_size);
  c.max_positions = read("n_positions", "max_position_embeddings", 1024);
  c.norm_eps = config_json.read<double>("layer_norm_epsilon").value_or(1e-5);
  if (config_json.read<bool>("scale_attn_by_inverse_layer_idx").value_or(false)) {
    fail("{}: scale_attn_by_inverse_layer_idx is not supported", config_json.source());
  }
  const bool scale_attention = config_json.read<bool>("scale_attn_weights").value_or(true);
  c.attention_scale = scale_attention ? 1.0 / std::sqrt(static_cast<double>(c.head_dim)) : 1.0;
  c.features.norm = NormKind::kLayerNorm;
  c.features.gated_mlp = false;
  c.features.learned_positions = true;
  c.features.activation = read_activation(config_json, "activation_function", "gelu_new");
  c.qkv_bias = c.output_bias = c.mlp_bias = true;
  c.tie_word_embeddings = read_tie_word_embeddings(config_json, true);
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{});
}

int64_t gpt2_tensor_layer(const std::string& name) {
  // Published GPT-2 checkpoints name blocks h.N.*; GPT2LMHeadModel saves them as transformer.h.N.*.
  return layer_by_prefix(name, {"h.", "transformer.h."}, {"lm_head."});
}

void load_gpt2(const Checkpoint& checkpoint, const ModelConfig& c, const LoadPlan& plan, ModelWeights& w) {
  std::string prefix = checkpoint.find("transformer.wte.weight") ? "transformer." : "";
  const WeightScope model(checkpoint, prefix, plan.device, plan.dtype);
  const int64_t hidden = c.hidden_size, inner = c.intermediate_size;
  // Conv1D keeps weights as [in, out]; the decoder wants the [out, in] layout of nn.Linear.
  auto conv1d = [](const WeightScope& scope, const std::string& name, int64_t in, int64_t out) {
    return Linear{scope.get(name + ".weight", {in, out}).t().contiguous(), scope.get(name + ".bias", {out})};
  };
  w.embed_tokens = load_token_embeddings(model, "wte.weight", c, plan);
  w.position_embeddings = model.get("wpe.weight", {c.max_positions, hidden});
  load_layers(model.sub("h"), plan, w, [&](const WeightScope& block, int64_t, LayerWeights& l) {
    l.attention_input_norm = load_norm(block, "ln_1", hidden, c);
    l.mlp_input_norm = load_norm(block, "ln_2", hidden, c);
    l.qkv = conv1d(block, "attn.c_attn", hidden, 3 * hidden);
    l.attention_output = conv1d(block, "attn.c_proj", hidden, hidden);
    l.feed_forward = DenseMlp{conv1d(block, "mlp.c_fc", hidden, inner), conv1d(block, "mlp.c_proj", inner, hidden)};
  });
  if (plan.final_norm) w.final_norm = load_norm(model, "ln_f", hidden, c);
  load_lm_head(checkpoint, {"lm_head.weight"}, c, plan, w);
}

}  // namespace probekit::model
