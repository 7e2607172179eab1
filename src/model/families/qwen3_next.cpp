// Qwen3-Next: Gated DeltaNet linear-attention layers (linear_attn) with a full-attention layer every few
// (full_attention_interval, or layer_types), whose q_proj also gives an output gate per head; zero-centred
// (1 + w) norms; partial rotary; Qwen 2 MoE's experts with a sigmoid-gated shared expert. What it shares with
// Qwen3.5 (families/qwen3_5.cpp) is here: the config keys and the hybrid layout.
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "model/families.h"

namespace probekit::model {

namespace {

// Each layer's mixer: layer_types (linear_attention / full_attention), else every full_attention_interval-th
// layer full, as Qwen3NextConfig fills layer_types.
void assign_mixers(const ConfigReader& config_json, ModelConfig& c) {
  Field<std::vector<std::string>> layer_types = config_json.read<std::vector<std::string>>("layer_types");
  if (layer_types.value) {
    const std::vector<std::string>& types = *layer_types.value;
    if (static_cast<int64_t>(types.size()) != c.num_layers) {
      fail("{}: 'layer_types' has {} entries for {} layers", config_json.source(), types.size(), c.num_layers);
    }
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] != "linear_attention" && types[i] != "full_attention") {
        fail("{}: 'layer_types' entry '{}' is not supported (supported: linear_attention, full_attention)",
             config_json.source(), types[i]);
      }
      c.layers[i].mixer = types[i] == "linear_attention" ? Mixer::kGatedDeltaNet : Mixer::kAttention;
    }
    return;
  }
  const int64_t interval = config_json.read<int64_t>("full_attention_interval").value_or(4);
  if (interval <= 0) fail("{} must be positive", config_json.where("full_attention_interval"));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    c.layers[static_cast<size_t>(i)].mixer = (i + 1) % interval == 0 ? Mixer::kAttention : Mixer::kGatedDeltaNet;
  }
}

void resolve_linear_attention(const ConfigReader& config_json, ModelConfig& c) {
  auto read = [&](const char* key, int64_t fallback) {
    const int64_t value = config_json.read<int64_t>(key).value_or(fallback);
    if (value <= 0 || value > 65536) fail("{} must be positive and plausible, got {}", config_json.where(key), value);
    return value;
  };
  LinearAttentionSpec& s = c.linear_attention;
  s.key_heads = read("linear_num_key_heads", 16);
  s.value_heads = read("linear_num_value_heads", 32);
  s.key_head_dim = read("linear_key_head_dim", 128);
  s.value_head_dim = read("linear_value_head_dim", 128);
  s.conv_kernel = read("linear_conv_kernel_dim", 4);
  if (s.value_heads % s.key_heads != 0) {
    fail("{}: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})", config_json.source(),
         s.value_heads, s.key_heads);
  }
}

// q_proj [heads * 2 * head_dim, ...] holds each head's query rows then its gate rows: the rows of the queries
// (which join k and v in qkv) and of the gate.
std::pair<at::Tensor, at::Tensor> query_and_gate_rows(int64_t heads, int64_t head_dim) {
  const at::Tensor rows = at::arange(heads * 2 * head_dim, at::kLong).view({heads, 2, head_dim});
  return {rows.select(1, 0).reshape({-1}), rows.select(1, 1).reshape({-1})};
}

void load_gated_attention(const WeightScope& attention, const ModelConfig& c, LayerWeights& l) {
  const int64_t hidden = c.hidden_size, head_dim = c.head_dim, q_out = c.num_heads * head_dim;
  const int64_t kv_out = c.num_kv_heads * head_dim;
  const auto [query_rows, gate_rows] = query_and_gate_rows(c.num_heads, head_dim);
  const Linear q_proj = attention.get_linear({{"q_proj", 2 * q_out}}, hidden, c.qkv_bias);
  const Linear queries = rows_selected(q_proj, query_rows);
  const Linear keys_values = attention.get_linear({{"k_proj", kv_out}, {"v_proj", kv_out}}, hidden, c.qkv_bias);
  l.qkv = stacked({queries, keys_values});
  if (c.qkv_bias) l.qkv.bias = at::cat({queries.bias, keys_values.bias});
  l.attention_gate = rows_selected(q_proj, gate_rows);
  l.attention_output = attention.get_linear({{"o_proj", hidden}}, q_out, c.output_bias);
  l.q_norm = load_norm(attention, "q_norm", head_dim, c);
  l.k_norm = load_norm(attention, "k_norm", head_dim, c);
}

void load_delta_net(const WeightScope& linear, const ModelConfig& c, LayerWeights& l,
                    const DeltaNetProjectionLoader& load_in_proj) {
  const LinearAttentionSpec& s = c.linear_attention;
  DeltaNetWeights& d = l.delta_net;
  d.in_proj = load_in_proj(linear, s, c.hidden_size);
  d.conv = linear.get("conv1d.weight", {s.conv_channels(), 1, s.conv_kernel}, at::kFloat)
               .view({s.conv_channels(), s.conv_kernel});
  d.A_log = linear.get("A_log", {s.value_heads}, at::kFloat);
  d.dt_bias = linear.get("dt_bias", {s.value_heads}, at::kFloat);
  // Qwen3NextRMSNormGated multiplies by w itself, unlike the model's other norms.
  d.norm = linear.get("norm.weight", {s.value_head_dim}, at::kFloat);
  l.attention_output = linear.get_linear({{"out_proj", c.hidden_size}}, s.value_dim());
}

// in_proj_qkvz holds, for each key head g, [q_g (dk) | k_g (dk) | v_g (r dv) | z_g (r dv)] with r value heads per
// key head (value head g r + i), and in_proj_ba [b_g (r) | a_g (r)]: their rows gathered into q, k, v, z, b, a (packed
// FP8 rows with their scales).
Linear qwen3_next_in_proj(const WeightScope& linear, const LinearAttentionSpec& s, int64_t hidden) {
  const int64_t groups = s.key_heads, r = s.value_heads / s.key_heads, dk = s.key_head_dim, dv = s.value_head_dim;
  const int64_t group_rows = 2 * dk + 2 * r * dv, qkvz_rows = groups * group_rows;
  Linear both = stacked({linear.get_linear({{"in_proj_qkvz", qkvz_rows}}, hidden),
                         linear.get_linear({{"in_proj_ba", groups * 2 * r}}, hidden)});
  const at::Tensor qkvz = at::arange(qkvz_rows, at::kLong).view({groups, group_rows});
  const at::Tensor ba = at::arange(qkvz_rows, qkvz_rows + groups * 2 * r, at::kLong).view({groups, 2 * r});
  auto rows = [&](const at::Tensor& grouped, int64_t offset, int64_t count) {
    return grouped.narrow(1, offset, count).reshape({-1});
  };
  return rows_selected(both, at::cat({rows(qkvz, 0, dk), rows(qkvz, dk, dk), rows(qkvz, 2 * dk, r * dv),
                                      rows(qkvz, 2 * dk + r * dv, r * dv), rows(ba, 0, r), rows(ba, r, r)}));
}

}  // namespace

void resolve_gated_delta_net_hybrid(const ConfigReader& config_json, ModelConfig& c,
                                    const DimensionDefaults& defaults) {
  resolve_llama_common(config_json, c, defaults);
  c.features.norm_adds_one = true;
  c.features.qk_norm = QkNorm::kPerHead;
  c.features.attention_output_gate = true;
  c.qkv_bias = c.output_bias = config_json.read<bool>("attention_bias").value_or(false);
  const double fraction = read_rotary_fraction(config_json, {"partial_rotary_factor"}, 0.25);
  const auto rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * fraction);
  c.layers.assign(static_cast<size_t>(c.num_layers),
                  LayerSpec{0, resolve_single_rope(config_json, 10000.0, rotary_dim)});
  assign_mixers(config_json, c);
  resolve_linear_attention(config_json, c);
}

void resolve_qwen3_next(const ConfigReader& config_json, ModelConfig& c) {
  resolve_gated_delta_net_hybrid(config_json, c, {151936, 2048, 5632, 48, 16, 2, 256, 32768, 1e-6});
  read_qwen_shared_experts(config_json, c, {512, 10, 512, true, 512});
  assign_sparse_layers(config_json, c);
}

void load_gated_delta_net_layout(const WeightScope& model, const ModelConfig& c, const LoadPlan& plan, ModelWeights& w,
                                 const DeltaNetProjectionLoader& load_in_proj, const ExpertLoader& load_experts) {
  const int64_t hidden = c.hidden_size;
  w.embed_tokens = load_token_embeddings(model, "embed_tokens.weight", c, plan);
  load_layers(model.sub("layers"), plan, w, [&](const WeightScope& layer, int64_t i, LayerWeights& l) {
    const LayerSpec& spec = c.layers[static_cast<size_t>(i)];
    l.attention_input_norm = load_norm(layer, "input_layernorm", hidden, c);
    l.mlp_input_norm = load_norm(layer, "post_attention_layernorm", hidden, c);
    if (spec.mixer == Mixer::kGatedDeltaNet) {
      load_delta_net(layer.sub("linear_attn"), c, l, load_in_proj);
    } else {
      load_gated_attention(layer.sub("self_attn"), c, l);
    }
    if (spec.feed_forward == FeedForward::kRoutedExperts) {
      l.feed_forward = load_experts(layer);
    } else {
      l.feed_forward = load_gated_mlp(layer.sub("mlp"), hidden, c.intermediate_size, false);
    }
  });
  if (plan.final_norm) w.final_norm = load_norm(model, "norm", hidden, c);
}

void load_qwen3_next(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                     ModelWeights& weights) {
  load_gated_delta_net_layout(WeightScope(checkpoint, "model.", plan.device, plan.dtype), config, plan, weights,
                              qwen3_next_in_proj,
                              [&](const WeightScope& layer) { return load_qwen2_moe_experts(layer, config); });
  load_lm_head(checkpoint, {"lm_head.weight"}, config, plan, weights);
}

int64_t qwen3_next_tensor_layer(const std::string& name) {
  // The multi-token-prediction head (mtp.*) is for speculative decoding: never read.
  if (name.compare(0, 4, "mtp.") == 0) return kUnusedTensor;
  return llama_style_tensor_layer(name);
}

}  // namespace probekit::model
