// DeepSeek V3 (V3.1, R1): multi-head latent attention (model/latent_attention.h) with
// YaRN whose mscale also sharpens the softmax; the first first_k_dense_replace layers a dense MLP, the others routed
// experts chosen by sigmoid scores within groups (n_group, topk_group) with a correction bias, weighted by the
// unbiased scores times routed_scaling_factor, plus an ungated shared expert. Published checkpoints carry a
// multi-token-prediction layer after the last one (model.layers.61.* for V3), never read; their FP8 weights
// (weight_scale_inv blocks) stay packed on a GPU like any other (model/quantization.h), the latent projections'
// rope rows reordered with their scales.
#include <cmath>

#include "common/error.h"
#include "model/families.h"

namespace probekit::model {

namespace {

int64_t read_dimension(const ConfigReader& config_json, const char* key, int64_t fallback) {
  const int64_t value = config_json.read<int64_t>(key).value_or(fallback);
  if (value <= 0 || value > 65536) fail("{} must be positive and plausible, got {}", config_json.where(key), value);
  return value;
}

// DeepseekV3Attention's softmax scale: qk_head_dim^-0.5, times mscale^2 where a rope other than the default sets
// mscale_all_dim, with mscale = 0.1 mscale_all_dim ln(factor) + 1 (1 for a factor up to 1).
double latent_attention_scale(const ConfigReader& config_json, const LatentAttentionSpec& s, const RopeSpec& rope) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.qk_head_dim()));
  Field<RawRope> raw = read_single_rope_parameters(config_json);
  if (!raw.value) raw = read_rope(config_json, "rope_scaling");
  const double all_dims = raw.value ? raw.value->mscale_all_dim.value_or(0.0) : 0.0;
  if (rope.type == RopeType::kDefault || all_dims == 0.0 || rope.factor <= 1.0) return scale;
  const double mscale = 0.1 * all_dims * std::log(rope.factor) + 1.0;
  return scale * mscale * mscale;
}

void resolve_latent_attention(const ConfigReader& config_json, ModelConfig& c) {
  LatentAttentionSpec& s = c.latent_attention;
  // q_lora_rank null: queries from one q_proj (DeepSeek-V2-Lite's layout).
  s.q_lora_rank = config_json.read<int64_t>("q_lora_rank").is_null() ? 0 : read_dimension(config_json, "q_lora_rank", 1536);
  s.kv_lora_rank = read_dimension(config_json, "kv_lora_rank", 512);
  s.nope_head_dim = read_dimension(config_json, "qk_nope_head_dim", 128);
  s.rope_head_dim = read_dimension(config_json, "qk_rope_head_dim", 64);
  s.value_head_dim = read_dimension(config_json, "v_head_dim", 128);
  s.interleaved_rope = config_json.read<bool>("rope_interleave").value_or(true);
  if (s.rope_head_dim % 2 != 0) fail("{} must be even, got {}", config_json.where("qk_rope_head_dim"), s.rope_head_dim);
  // The expanded keys and values have one head per query head; head_dim is the queries' and keys' width.
  c.num_kv_heads = c.num_heads;
  c.head_dim = s.qk_head_dim();
  c.qkv_bias = c.output_bias = config_json.read<bool>("attention_bias").value_or(false);
}

void resolve_deepseek_experts(const ConfigReader& config_json, ModelConfig& c) {
  RoutedExpertsSpec& e = c.routed_experts;
  e.scoring = RouterScoring::kSigmoidGroupedTopK;
  e.experts = read_dimension(config_json, "n_routed_experts", 256);
  e.top_k = read_dimension(config_json, "num_experts_per_tok", 8);
  e.intermediate_size = read_dimension(config_json, "moe_intermediate_size", 2048);
  e.normalize_top_k = config_json.read<bool>("norm_topk_prob").value_or(true);
  e.shared_expert_intermediate_size =
      e.intermediate_size * config_json.read<int64_t>("n_shared_experts").value_or(1);
  e.groups = read_dimension(config_json, "n_group", 8);
  e.top_groups = read_dimension(config_json, "topk_group", 4);
  e.routed_scaling_factor = config_json.read<double>("routed_scaling_factor").value_or(2.5);
  // Each group is scored by its two best experts.
  if (e.experts % e.groups != 0 || e.experts / e.groups < 2) {
    fail("{}: n_routed_experts ({}) must be a multiple of n_group ({}) with at least 2 experts a group",
         config_json.source(), e.experts, e.groups);
  }
  if (e.top_groups > e.groups) {
    fail("{}: topk_group ({}) exceeds n_group ({})", config_json.source(), e.top_groups, e.groups);
  }
  if (e.shared_expert_intermediate_size < 0) fail("{} must not be negative", config_json.where("n_shared_experts"));
  // The original code places experts on the layers i with i % moe_layer_freq == 0; transformers ignores the key, so
  // only the value every published checkpoint has is read.
  const int64_t frequency = config_json.read<int64_t>("moe_layer_freq").value_or(1);
  if (frequency != 1) {
    fail("{} is {}; only 1 (routed experts on every layer from first_k_dense_replace on) is supported",
         config_json.where("moe_layer_freq"), frequency);
  }
}

// The order of the rows of a weight (or a bias) of `blocks` blocks of `block` rows that reorders each block's rope
// rows [offset, offset + rope) from interleaved pairs (x0, x1), (x2, x3), ... into rotate-half's halves (x0, x2, ...,
// x1, x3, ...), as the reference's apply_rotary_pos_emb_interleave reorders its queries and keys.
at::Tensor rope_row_order(const ModelConfig& c, int64_t blocks, int64_t block, int64_t offset) {
  const int64_t rope = c.latent_attention.rope_head_dim;
  at::Tensor order = at::arange(blocks * block, at::kLong).view({blocks, block});
  if (c.latent_attention.interleaved_rope) {
    at::Tensor halves = at::arange(rope, at::kLong).view({rope / 2, 2}).t().reshape({1, rope});
    order.narrow(1, offset, rope).copy_(halves + offset + order.narrow(1, 0, 1));
  }
  return order.view({-1});
}

void load_latent_attention(const WeightScope& attention, const ModelConfig& c, LayerWeights& l) {
  const LatentAttentionSpec& s = c.latent_attention;
  const int64_t hidden = c.hidden_size, heads = c.num_heads, q_out = heads * s.qk_head_dim();
  const int64_t kv_a_out = s.kv_lora_rank + s.rope_head_dim;
  LatentAttentionWeights& a = l.latent_attention;
  // The rope rows reordered after loading; an FP8 weight kept packed moves its rows with their scales.
  const at::Tensor kv_a_order = rope_row_order(c, 1, kv_a_out, s.kv_lora_rank);
  const at::Tensor query_order = rope_row_order(c, heads, s.qk_head_dim(), s.nope_head_dim);
  Linear queries;
  if (s.q_lora_rank > 0) {
    queries = attention.get_linear({{"q_a_proj", s.q_lora_rank}}, hidden);
    a.q_a_norm = load_norm(attention, "q_a_layernorm", s.q_lora_rank, c);
    a.q_b = rows_selected(attention.get_linear({{"q_b_proj", q_out}}, s.q_lora_rank), query_order);
  } else {
    queries = rows_selected(attention.get_linear({{"q_proj", q_out}}, hidden), query_order);
  }
  a.down = stacked({queries, rows_selected(attention.get_linear({{"kv_a_proj_with_mqa", kv_a_out}}, hidden), kv_a_order)});
  if (c.qkv_bias) {
    // attention_bias gives q_a_proj and kv_a_proj_with_mqa a bias, never q_proj or q_b_proj.
    at::Tensor kv_a_bias = attention.get("kv_a_proj_with_mqa.bias", {kv_a_out});
    at::Tensor query_bias = s.q_lora_rank > 0 ? attention.get("q_a_proj.bias", {s.q_lora_rank})
                                              : at::zeros({q_out}, kv_a_bias.options());
    a.down.bias = at::cat({query_bias, kv_a_bias.index_select(0, kv_a_order.to(kv_a_bias.device()))});
  }
  a.kv_a_norm = load_norm(attention, "kv_a_layernorm", s.kv_lora_rank, c);
  a.kv_b = attention.get_linear({{"kv_b_proj", heads * (s.nope_head_dim + s.value_head_dim)}}, s.kv_lora_rank);
  l.attention_output = attention.get_linear({{"o_proj", hidden}}, heads * s.value_head_dim, c.output_bias);
}

RoutedExperts load_deepseek_experts(const WeightScope& layer, const ModelConfig& c) {
  const RoutedExpertsSpec& spec = c.routed_experts;
  const WeightScope mlp = layer.sub("mlp");
  RoutedExperts experts = load_routed_experts(mlp, c, {"gate", "gate_proj", "up_proj", "down_proj"});
  // The reference casts its router's weight (in the model's dtype) and the tokens to fp32; the correction bias is
  // kept in fp32 as the checkpoints store it.
  experts.router = experts.router.to(at::kFloat);
  experts.score_correction_bias = mlp.get("gate.e_score_correction_bias", {spec.experts}, at::kFloat);
  if (spec.shared_expert_intermediate_size > 0) {
    experts.shared_expert =
        load_gated_mlp(mlp.sub("shared_experts"), c.hidden_size, spec.shared_expert_intermediate_size, false);
  }
  return experts;
}

}  // namespace

void resolve_deepseek_v3(const ConfigReader& config_json, ModelConfig& c) {
  // DeepseekV3Config's defaults (head_dim there is qk_rope_head_dim's; resolve_latent_attention sets ours).
  resolve_llama_common(config_json, c, {129280, 7168, 18432, 61, 128, 128, 64, 4096, 1e-6});
  resolve_latent_attention(config_json, c);
  resolve_deepseek_experts(config_json, c);
  const RopeSpec rope = resolve_single_rope(config_json, 10000.0, c.latent_attention.rope_head_dim);
  c.attention_scale = latent_attention_scale(config_json, c.latent_attention, rope);
  const int64_t dense_layers = config_json.read<int64_t>("first_k_dense_replace").value_or(3);
  if (dense_layers < 0) fail("{} must not be negative", config_json.where("first_k_dense_replace"));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const FeedForward feed_forward = i < dense_layers ? FeedForward::kDenseMlp : FeedForward::kRoutedExperts;
    c.layers.push_back(LayerSpec{0, rope, feed_forward, 0, 0, Mixer::kLatentAttention});
  }
}

void load_deepseek_v3(const Checkpoint& checkpoint, const ModelConfig& c, const LoadPlan& plan, ModelWeights& w) {
  const WeightScope model(checkpoint, "model.", plan.device, plan.dtype);
  const int64_t hidden = c.hidden_size;
  w.embed_tokens = load_token_embeddings(model, "embed_tokens.weight", c, plan);
  load_layers(model.sub("layers"), plan, w, [&](const WeightScope& layer, int64_t i, LayerWeights& l) {
    l.attention_input_norm = load_norm(layer, "input_layernorm", hidden, c);
    l.mlp_input_norm = load_norm(layer, "post_attention_layernorm", hidden, c);
    load_latent_attention(layer.sub("self_attn"), c, l);
    if (c.layers[static_cast<size_t>(i)].feed_forward == FeedForward::kRoutedExperts) {
      l.feed_forward = load_deepseek_experts(layer, c);
    } else {
      l.feed_forward = load_gated_mlp(layer.sub("mlp"), hidden, c.intermediate_size, false);
    }
  });
  if (plan.final_norm) w.final_norm = load_norm(model, "norm", hidden, c);
  load_lm_head(checkpoint, {"lm_head.weight"}, c, plan, w);
}

}  // namespace probekit::model
