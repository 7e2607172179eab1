// GPT-NeoX (Pythia): LayerNorm, exact GELU, parallel residual, partial rotary embeddings, and a fused qkv
// projection interleaved per head ([heads, (q, k, v), head_dim]) that is regrouped at load time.
#include <cmath>

#include "common/error.h"
#include "model/families.h"

namespace probekit::model {

namespace {

// The rotary fraction of each head: rotary_pct (GPTNeoXConfig), partial_rotary_factor, or rope_parameters'.
RopeSpec resolve_partial_rope(const ConfigReader& config_json, int64_t head_dim) {
  Field<RawRope> parameters = read_single_rope_parameters(config_json);
  double fraction = read_rotary_fraction(config_json, {"rotary_pct", "partial_rotary_factor"}, 0.25);
  auto rotary_dim = static_cast<int64_t>(static_cast<double>(head_dim) * fraction);
  double theta = config_json.read<double>("rotary_emb_base")
                     .value_or(config_json.read<double>("rope_theta").value_or(10000.0));
  if (parameters.value) return make_rope(parameters, theta, rotary_dim, config_json, "rope_parameters");
  return make_rope(read_rope(config_json, "rope_scaling"), theta, rotary_dim, config_json, "rope_scaling");
}

}  // namespace

void resolve_gpt_neox(const ConfigReader& config_json, ModelConfig& c) {
  auto read = [&](const char* key, int64_t fallback) { return config_json.read<int64_t>(key).value_or(fallback); };
  c.vocab_size = read("vocab_size", 50432);
  c.hidden_size = read("hidden_size", 6144);
  c.num_layers = read("num_hidden_layers", 44);
  c.num_heads = read("num_attention_heads", 64);
  c.num_kv_heads = c.num_heads;
  check_core_dimensions(c, config_json.source());
  if (c.hidden_size % c.num_heads != 0) {
    fail("{}: hidden_size {} is not divisible by num_attention_heads {}", config_json.source(), c.hidden_size,
         c.num_heads);
  }
  c.head_dim = c.hidden_size / c.num_heads;
  c.intermediate_size = read("intermediate_size", 24576);
  c.max_positions = read("max_position_embeddings", 2048);
  c.norm_eps = config_json.read<double>("layer_norm_eps").value_or(1e-5);
  c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  c.features.norm = NormKind::kLayerNorm;
  c.features.gated_mlp = false;
  c.features.parallel_residual = config_json.read<bool>("use_parallel_residual").value_or(true);
  c.features.activation = read_activation(config_json, "hidden_act", "gelu");
  c.qkv_bias = c.output_bias = config_json.read<bool>("attention_bias").value_or(true);
  c.mlp_bias = true;
  c.tie_word_embeddings = read_tie_word_embeddings(config_json, false);
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, resolve_partial_rope(config_json, c.head_dim)});
}

int64_t gpt_neox_tensor_layer(const std::string& name) {
  return layer_by_prefix(name, {"gpt_neox.layers."}, {"embed_out."});
}

void load_gpt_neox(const Checkpoint& checkpoint, const ModelConfig& c, const LoadPlan& plan, ModelWeights& w) {
  const WeightScope model(checkpoint, "gpt_neox.", plan.device, plan.dtype);
  const int64_t hidden = c.hidden_size, inner = c.intermediate_size, heads = c.num_heads, head_dim = c.head_dim;
  auto linear = [&](const WeightScope& scope, const std::string& name, int64_t out, int64_t in) {
    Linear l{scope.get(name + ".weight", {out, in}), {}};
    if (c.output_bias || name.rfind("mlp", 0) == 0) l.bias = scope.get(name + ".bias", {out});
    return l;
  };
  w.embed_tokens = load_token_embeddings(model, "embed_in.weight", c, plan);
  load_layers(model.sub("layers"), plan, w, [&](const WeightScope& layer, int64_t, LayerWeights& l) {
    l.attention_input_norm = load_norm(layer, "input_layernorm", hidden, c);
    l.mlp_input_norm = load_norm(layer, "post_attention_layernorm", hidden, c);
    // [heads, 3, head_dim, hidden] -> [3, heads, head_dim, hidden]: all queries, then all keys, then all values.
    at::Tensor qkv = layer.get("attention.query_key_value.weight", {3 * hidden, hidden});
    l.qkv.weight = qkv.view({heads, 3, head_dim, hidden}).permute({1, 0, 2, 3}).reshape({3 * hidden, hidden}).contiguous();
    if (c.qkv_bias) {
      at::Tensor bias = layer.get("attention.query_key_value.bias", {3 * hidden});
      l.qkv.bias = bias.view({heads, 3, head_dim}).permute({1, 0, 2}).reshape({3 * hidden}).contiguous();
    }
    l.attention_output = linear(layer, "attention.dense", hidden, hidden);
    l.feed_forward =
        DenseMlp{linear(layer, "mlp.dense_h_to_4h", inner, hidden), linear(layer, "mlp.dense_4h_to_h", hidden, inner)};
  });
  if (plan.final_norm) w.final_norm = load_norm(model, "final_layer_norm", hidden, c);
  load_lm_head(checkpoint, {"embed_out.weight"}, c, plan, w);
}

}  // namespace probekit::model
