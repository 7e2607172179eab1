// What the families share: config checks and readers (dimensions, activations, sliding windows, sparse layers) and
// the weight loaders of the Llama layout, norms, MLPs, routed experts and the LM head.
#include "model/families.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "model/quantization.h"

namespace probekit::model {

namespace {

// The widest head a model's or a layer's own head_dim may give: caches and products are sized from it.
constexpr int64_t kMaxHeadDim = 4096;

void check_positive(int64_t value, const char* what, const std::string& source) {
  if (value <= 0) fail("{}: {} must be positive, got {}", source, what, value);
}

void check_routed_experts(const RoutedExpertsSpec& experts, const std::string& source) {
  check_positive(experts.intermediate_size, "the experts' intermediate size", source);
  if (experts.top_k < 1 || experts.top_k > experts.experts) {
    fail("{}: num_experts_per_tok {} must be between 1 and the number of experts, {}", source, experts.top_k,
         experts.experts);
  }
}

}  // namespace

int64_t layer_by_prefix(const std::string& name, std::initializer_list<std::string_view> layer_prefixes,
                        std::initializer_list<std::string_view> head_prefixes) {
  auto starts_with = [&](std::string_view prefix) { return name.compare(0, prefix.size(), prefix) == 0; };
  for (std::string_view prefix : head_prefixes) {
    if (starts_with(prefix)) return kLmHeadTensor;
  }
  for (std::string_view prefix : layer_prefixes) {
    if (!starts_with(prefix)) continue;
    size_t digits = prefix.size(), end = name.find('.', digits);
    if (end == std::string::npos || end == digits || end - digits > 9) continue;
    if (name.find_first_not_of("0123456789", digits) != end) continue;
    return std::stoll(name.substr(digits, end - digits));
  }
  return kGlobalTensor;
}

int64_t llama_style_tensor_layer(const std::string& name) {
  return layer_by_prefix(name, {"model.layers."}, {"lm_head."});
}

void check_core_dimensions(const ModelConfig& c, const std::string& source) {
  check_positive(c.num_layers, "num_hidden_layers", source);
  check_positive(c.hidden_size, "hidden_size", source);
  check_positive(c.num_heads, "num_attention_heads", source);
  if (c.num_layers > 100000 || c.hidden_size > (1 << 20) || c.num_heads > 4096) {
    fail("{}: implausible model dimensions (layers {}, hidden {}, heads {})", source, c.num_layers, c.hidden_size,
         c.num_heads);
  }
}

namespace {

// A layer's own shape (Gemma 4's full layers: 0 means the model's) is bounded as the model's is: a family reading
// it from the file (global_head_dim, per_layer_config) must not size its caches and products from any number.
void check_layer(const ModelConfig& c, int64_t index, const std::string& source) {
  const LayerSpec& layer = c.layers[static_cast<size_t>(index)];
  if (layer.sliding_window < 0) fail("{}: sliding_window must not be negative", source);
  if (layer.head_dim < 0 || layer.head_dim > kMaxHeadDim) {
    fail("{}: layer {}'s head_dim {} must be between 1 and {}", source, index, layer.head_dim, kMaxHeadDim);
  }
  if (layer.num_kv_heads < 0 || (layer.num_kv_heads > 0 && c.num_heads % layer.num_kv_heads != 0)) {
    fail("{}: layer {}'s num_key_value_heads {} must divide num_attention_heads ({})", source, index,
         layer.num_kv_heads, c.num_heads);
  }
  if (layer.rope.type == RopeType::kNone) return;
  const int64_t head_dim = layer_head_dim(c, index);
  if (layer.rope.rotary_dim <= 0 || layer.rope.rotary_dim > head_dim || layer.rope.rotary_dim % 2 != 0) {
    fail("{}: rotary dimension {} must be even and within head_dim {}", source, layer.rope.rotary_dim, head_dim);
  }
  if (!(layer.rope.theta > 0) || !(layer.rope.factor > 0)) fail("{}: rope theta and factor must be positive", source);
}

}  // namespace

void validate_config(const ModelConfig& c, const std::string& source) {
  check_core_dimensions(c, source);
  check_positive(c.vocab_size, "vocab_size", source);
  check_positive(c.intermediate_size, "intermediate_size", source);
  check_positive(c.num_kv_heads, "num_key_value_heads", source);
  check_positive(c.head_dim, "head_dim", source);
  if (c.num_heads % c.num_kv_heads != 0) {
    fail("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", source, c.num_heads,
         c.num_kv_heads);
  }
  if (c.head_dim > kMaxHeadDim) fail("{}: implausible head_dim {}", source, c.head_dim);
  if (static_cast<int64_t>(c.layers.size()) != c.num_layers) {
    fail("{}: {} layer settings for {} layers", source, c.layers.size(), c.num_layers);
  }
  if (!(c.norm_eps > 0) || !(c.attention_scale > 0)) fail("{}: norm epsilon and attention scale must be positive", source);
  if (c.features.learned_positions) check_positive(c.max_positions, "max_position_embeddings", source);
  if (!routed_expert_layers(c).empty()) check_routed_experts(c.routed_experts, source);
  for (int64_t i = 0; i < c.num_layers; ++i) check_layer(c, i, source);
}

Activation read_activation(const ConfigReader& config_json, const char* key, const char* default_name) {
  const std::string name = config_json.read<std::string>(key).value_or(default_name);
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast" || name == "gelu_python_tanh") {
    return Activation::kGeluTanh;
  }
  if (name == "gelu" || name == "gelu_python") return Activation::kGeluExact;
  fail("{} is '{}', an unsupported activation (supported: silu, gelu, gelu_pytorch_tanh, gelu_new)",
       config_json.where(key), name);
}

std::vector<bool> sliding_from_layer_types(const ConfigReader& config_json, int64_t num_layers) {
  Field<std::vector<std::string>> layer_types = config_json.read<std::vector<std::string>>("layer_types");
  if (!layer_types.value) return {};
  const std::vector<std::string>& types = *layer_types.value;
  if (static_cast<int64_t>(types.size()) != num_layers) {
    fail("{}: 'layer_types' has {} entries for {} layers", config_json.source(), types.size(), num_layers);
  }
  std::vector<bool> sliding;
  for (const std::string& type : types) {
    if (type != "sliding_attention" && type != "full_attention") {
      fail("{}: 'layer_types' entry '{}' is not supported (supported: full_attention, sliding_attention)",
           config_json.source(), type);
    }
    sliding.push_back(type == "sliding_attention");
  }
  return sliding;
}

void resolve_qwen_windows(const ConfigReader& config_json, ModelConfig& c) {
  int64_t window = config_json.read<int64_t>("sliding_window").value_or(4096);
  std::vector<bool> sliding = sliding_from_layer_types(config_json, c.num_layers);
  if (sliding.empty() && config_json.read<bool>("use_sliding_window").value_or(false)) {
    int64_t first = config_json.read<int64_t>("max_window_layers").value_or(28);
    for (int64_t i = 0; i < c.num_layers; ++i) sliding.push_back(i >= first);
  }
  apply_sliding_windows(c, sliding, window);
}

void resolve_llama_common(const ConfigReader& config_json, ModelConfig& c, const DimensionDefaults& d) {
  auto read = [&](const char* key, int64_t fallback) { return config_json.read<int64_t>(key).value_or(fallback); };
  c.vocab_size = read("vocab_size", d.vocab_size);
  c.hidden_size = read("hidden_size", d.hidden_size);
  c.intermediate_size = read("intermediate_size", d.intermediate_size);
  c.num_layers = read("num_hidden_layers", d.num_layers);
  c.num_heads = read("num_attention_heads", d.num_heads);
  c.num_kv_heads = read("num_key_value_heads", d.num_kv_heads > 0 ? d.num_kv_heads : c.num_heads);
  c.max_positions = read("max_position_embeddings", d.max_positions);
  c.norm_eps = config_json.read<double>("rms_norm_eps").value_or(d.norm_eps);
  Field<int64_t> head_dim = config_json.read<int64_t>("head_dim");
  check_core_dimensions(c, config_json.source());
  if (head_dim.value) {
    c.head_dim = *head_dim.value;
  } else if (d.head_dim > 0) {
    c.head_dim = d.head_dim;
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      fail("{}: hidden_size {} is not divisible by num_attention_heads {}", config_json.source(), c.hidden_size,
           c.num_heads);
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  c.features.activation = read_activation(config_json, d.activation_key, d.activation);
  c.tie_word_embeddings = read_tie_word_embeddings(config_json, d.tie_word_embeddings);
}

void apply_sliding_windows(ModelConfig& c, const std::vector<bool>& sliding, int64_t window) {
  for (size_t i = 0; i < c.layers.size(); ++i) c.layers[i].sliding_window = i < sliding.size() && sliding[i] ? window : 0;
}

at::Tensor load_token_embeddings(const WeightScope& scope, const std::string& name, const ModelConfig& c,
                                 const LoadPlan& plan) {
  std::vector<int64_t> shape = {c.vocab_size, c.hidden_size};
  return plan.embeddings_on_host ? scope.view(name, shape) : scope.get(name, shape);
}

Norm load_norm(const WeightScope& scope, const std::string& name, int64_t size, const ModelConfig& config) {
  // Norms are applied in fp32 whatever the compute dtype.
  Norm norm;
  norm.weight = scope.get(name + ".weight", {size}, at::kFloat);
  if (config.features.norm == NormKind::kLayerNorm) norm.bias = scope.get(name + ".bias", {size}, at::kFloat);
  // Gemma multiplies by (1 + w) in fp32; folding the 1 in at load time gives the same numbers.
  if (config.features.norm_adds_one) norm.weight = norm.weight + 1.0;
  return norm;
}

void load_layers(const WeightScope& layers, const LoadPlan& plan, ModelWeights& weights,
                 const std::function<void(const WeightScope& layer, int64_t i, LayerWeights& weights)>& load_layer) {
  weights.layers.resize(static_cast<size_t>(plan.layers));
  for (int64_t i = 0; i < plan.layers; ++i) {
    const WeightScope layer =
        plan.layer_devices.empty() ? layers.sub(i) : layers.sub(i).on(plan.layer_devices.at(static_cast<size_t>(i)));
    load_layer(layer, i, weights.layers[static_cast<size_t>(i)]);
  }
}

DenseMlp load_gated_mlp(const WeightScope& mlp, int64_t hidden, int64_t inner, bool bias) {
  DenseMlp dense;
  dense.in = mlp.get_linear({{"gate_proj", inner}, {"up_proj", inner}}, hidden, bias);
  dense.out = mlp.get_linear({{"down_proj", hidden}}, inner, bias);
  return dense;
}

RoutedExperts load_routed_experts(const WeightScope& block, const ModelConfig& c, const ExpertNames& names) {
  const int64_t hidden = c.hidden_size, experts = c.routed_experts.experts, inner = c.routed_experts.intermediate_size;
  RoutedExperts routed;
  routed.router = block.get(std::string(names.router) + ".weight", {experts, hidden});
  // Filled expert by expert, so that at most one expert's weights exist twice on the device while loading; FP8
  // experts stay packed where get_linear keeps them so.
  const WeightScope all = block.sub("experts");
  for (int64_t e = 0; e < experts; ++e) {
    const WeightScope expert = all.sub(e);
    const Linear gate_up = expert.get_linear({{names.gate, inner}, {names.up, inner}}, hidden);
    const Linear down = expert.get_linear({{names.down, hidden}}, inner);
    const bool packed = gate_up.fp8.defined() && down.fp8.defined();
    if (e == 0 && packed) {
      routed.gate_up_fp8 = stacked_fp8_room(gate_up.fp8, experts), routed.down_fp8 = stacked_fp8_room(down.fp8, experts);
    } else if (e == 0) {
      routed.gate_up = at::empty({experts, 2 * inner, hidden}, routed.router.options());
      routed.down = at::empty({experts, hidden, inner}, routed.router.options());
    } else if (!packed && routed.gate_up_fp8.defined()) {
      unpack_fp8_experts(routed, e, routed.router.options());
    }
    if (packed && routed.gate_up_fp8.defined()) {
      put_fp8(routed.gate_up_fp8, e, gate_up.fp8), put_fp8(routed.down_fp8, e, down.fp8);
    } else {
      routed.gate_up[e].copy_(gate_up.dense_weight()), routed.down[e].copy_(down.dense_weight());
    }
  }
  return routed;
}

namespace {

// The norms of a Llama-style layer: input_layernorm and post_attention_layernorm (Llama's MLP input norm), or
// Gemma 2/3's four norms named by position, or OLMo 2's two post-norms alone.
void load_llama_norms(const WeightScope& layer, const ModelConfig& c, LayerWeights& l) {
  const int64_t hidden = c.hidden_size;
  if (c.features.input_norms) l.attention_input_norm = load_norm(layer, "input_layernorm", hidden, c);
  if (c.features.attention_output_norm) {
    l.attention_output_norm = load_norm(layer, "post_attention_layernorm", hidden, c);
    if (c.features.input_norms) l.mlp_input_norm = load_norm(layer, "pre_feedforward_layernorm", hidden, c);
    l.mlp_output_norm = load_norm(layer, "post_feedforward_layernorm", hidden, c);
  } else {
    l.mlp_input_norm = load_norm(layer, "post_attention_layernorm", hidden, c);
  }
}

void load_llama_attention(const WeightScope& attention, const ModelConfig& c, int64_t layer, LayerWeights& l) {
  const int64_t head_dim = layer_head_dim(c, layer);
  const int64_t hidden = c.hidden_size, q_out = c.num_heads * head_dim, kv_out = layer_kv_heads(c, layer) * head_dim;
  l.qkv = attention.get_linear({{"q_proj", q_out}, {"k_proj", kv_out}, {"v_proj", kv_out}}, hidden, c.qkv_bias);
  l.attention_output = attention.get_linear({{"o_proj", hidden}}, q_out, c.output_bias);
  if (c.features.qk_norm == QkNorm::kPerHead) {
    l.q_norm = load_norm(attention, "q_norm", head_dim, c);
    l.k_norm = load_norm(attention, "k_norm", head_dim, c);
  } else if (c.features.qk_norm == QkNorm::kWholeProjection) {
    l.q_norm = load_norm(attention, "q_norm", q_out, c);
    l.k_norm = load_norm(attention, "k_norm", kv_out, c);
  }
}

}  // namespace

void load_llama_layer(const WeightScope& layer, const ModelConfig& c, int64_t i, LayerWeights& l,
                      const ExpertLoader& load_experts) {
  load_llama_norms(layer, c, l);
  load_llama_attention(layer.sub("self_attn"), c, i, l);
  if (c.layers[static_cast<size_t>(i)].feed_forward == FeedForward::kRoutedExperts) {
    l.feed_forward = load_experts(layer);
  } else {
    l.feed_forward = load_gated_mlp(layer.sub("mlp"), c.hidden_size, c.intermediate_size, c.mlp_bias);
  }
}

void load_llama_layout(const WeightScope& model, const ModelConfig& c, const LoadPlan& plan, ModelWeights& w,
                       const ExpertLoader& load_experts) {
  w.embed_tokens = load_token_embeddings(model, "embed_tokens.weight", c, plan);
  load_layers(model.sub("layers"), plan, w, [&](const WeightScope& layer, int64_t i, LayerWeights& l) {
    load_llama_layer(layer, c, i, l, load_experts);
  });
  if (plan.final_norm) w.final_norm = load_norm(model, "norm", c.hidden_size, c);
}

void load_llama_style(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                      ModelWeights& weights) {
  load_llama_layout(WeightScope(checkpoint, "model.", plan.device, plan.dtype), config, plan, weights);
  load_lm_head(checkpoint, {"lm_head.weight"}, config, plan, weights);
}

bool read_tie_word_embeddings(const ConfigReader& config_json, bool family_default) {
  return config_json.read<bool>("tie_word_embeddings").value_or(family_default);
}

void load_lm_head(const Checkpoint& checkpoint, std::initializer_list<const char*> names, const ModelConfig& c,
                  const LoadPlan& plan, ModelWeights& weights) {
  if (!plan.lm_head) return;
  if (c.tie_word_embeddings) {
    // transformers ties them whether or not the file also holds a head.
    weights.lm_head = weights.embed_tokens;
    return;
  }
  const WeightScope root(checkpoint, "", plan.device, plan.dtype);
  std::string expected;
  for (const char* name : names) {
    if (checkpoint.find(name)) {
      weights.lm_head = root.get(name, {c.vocab_size, c.hidden_size});
      return;
    }
    expected += expected.empty() ? name : std::string(" or ") + name;
  }
  throw MissingLmHead(fmt::format("{}: no LM head {} (config.json does not tie it to the token embeddings)",
                                  checkpoint.describe_files(), expected));
}

int64_t read_expert_count(const ConfigReader& config_json, int64_t fallback) {
  Field<int64_t> published = config_json.read<int64_t>("num_experts");
  Field<int64_t> local = config_json.read<int64_t>("num_local_experts");
  if (published.value && local.value && *published.value != *local.value) {
    fail("{}: 'num_experts' ({}) and 'num_local_experts' ({}) disagree", config_json.source(), *published.value,
         *local.value);
  }
  int64_t experts = published.value_or(local.value_or(fallback));
  if (experts <= 0 || experts > 65536) fail("{}: implausible number of experts {}", config_json.source(), experts);
  return experts;
}

void assign_sparse_layers(const ConfigReader& config_json, ModelConfig& c) {
  const int64_t step = config_json.read<int64_t>("decoder_sparse_step").value_or(1);
  if (step <= 0) fail("{} must be positive", config_json.where("decoder_sparse_step"));
  std::vector<int64_t> dense = config_json.read<std::vector<int64_t>>("mlp_only_layers").value_or(std::vector<int64_t>{});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    bool sparse = (i + 1) % step == 0 && std::find(dense.begin(), dense.end(), i) == dense.end();
    c.layers[static_cast<size_t>(i)].feed_forward = sparse ? FeedForward::kRoutedExperts : FeedForward::kDenseMlp;
  }
}

}  // namespace probekit::model
