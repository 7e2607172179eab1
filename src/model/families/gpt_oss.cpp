// gpt-oss (gpt-oss-20b, gpt-oss-120b): Llama-style attention with q/k/v/o biases, a learned sink logit per head
// in every softmax, sliding-window and full layers alternating (layer_types), YaRN rope; every layer's
// feed-forward is routed experts: a router with a bias takes the top k logits and softmaxes over those, and each
// expert is a gated MLP with biases and a clamped SwiGLU. The checkpoint stores the experts fused, [experts, in,
// out] with gate and up interleaved along out (even columns gate, odd up), or as MXFP4 blocks [experts, out,
// in / 32, 16]; both are turned at load into RoutedExperts' [experts, out, in] with gate and up as two halves.
#include <fmt/format.h>

#include "common/error.h"
#include "model/families.h"
#include "model/quantization.h"

namespace probekit::model {

namespace {

// GptOssConfig's rope when config.json sets none: YaRN x32 over 4096 tokens, its ramp not rounded.
RopeSpec resolve_gpt_oss_rope(const ConfigReader& config_json, int64_t rotary_dim) {
  if (config_json.has("rope_parameters") || config_json.has("rope_scaling")) {
    return resolve_single_rope(config_json, 150000.0, rotary_dim);
  }
  RawRope yarn;
  yarn.rope_type = {true, "yarn"};
  yarn.factor = {true, 32.0};
  yarn.beta_fast = {true, 32.0};
  yarn.beta_slow = {true, 1.0};
  yarn.truncate = {true, false};
  yarn.original_max_position_embeddings = {true, 4096};
  const double theta = config_json.read<double>("rope_theta").value_or(150000.0);
  return make_rope({true, yarn}, theta, rotary_dim, config_json, "rope_parameters");
}

// The order of rows that turns interleaved gate/up rows (gate 0, up 0, gate 1, ...) into [gate; up].
at::Tensor deinterleaved_rows(int64_t inner, at::Device device) {
  at::Tensor even = at::arange(0, 2 * inner, 2, at::TensorOptions().dtype(at::kLong).device(device));
  return at::cat({even, even + 1});
}

// The experts' weights as RoutedExperts holds them, [experts, out, in] with gate and up as two halves: MXFP4
// dequantized or kept packed (whose blocks and scales are rows of the weight, so they permute alike), or the
// plain [experts, in, out] tensors transposed.
void load_expert_weights(RoutedExperts& routed, const WeightScope& experts, const ModelConfig& c, bool keep_packed) {
  const int64_t hidden = c.hidden_size, count = c.routed_experts.experts, inner = c.routed_experts.intermediate_size;
  const at::Tensor rows = deinterleaved_rows(inner, experts.device());
  routed.gate_up_bias = experts.get("gate_up_proj_bias", {count, 2 * inner}).index_select(1, rows).contiguous();
  routed.down_bias = experts.get("down_proj_bias", {count, hidden});
  if (!experts.contains("gate_up_proj_blocks")) {
    routed.gate_up = experts.get("gate_up_proj", {count, hidden, 2 * inner}).transpose(1, 2).index_select(1, rows).contiguous();
    routed.down = experts.get("down_proj", {count, inner, hidden}).transpose(1, 2).contiguous();
  } else if (keep_packed) {
    const Mxfp4Weight gate_up = experts.get_mxfp4_packed("gate_up_proj", {count, 2 * inner, hidden});
    routed.gate_up_mxfp4 = {gate_up.blocks.index_select(1, rows).contiguous(), gate_up.scales.index_select(1, rows).contiguous()};
    routed.down_mxfp4 = experts.get_mxfp4_packed("down_proj", {count, hidden, inner});
  } else {
    routed.gate_up = experts.get_mxfp4("gate_up_proj", {count, 2 * inner, hidden}).index_select(1, rows).contiguous();
    routed.down = experts.get_mxfp4("down_proj", {count, hidden, inner});
  }
}

RoutedExperts load_gpt_oss_experts(const WeightScope& layer, const ModelConfig& c, const LoadPlan& plan) {
  const int64_t count = c.routed_experts.experts;
  const WeightScope mlp = layer.sub("mlp");
  RoutedExperts routed;
  routed.router = mlp.get("router.weight", {count, c.hidden_size});
  routed.router_bias = mlp.get("router.bias", {count});
  load_expert_weights(routed, mlp.sub("experts"), c, plan.keep_mxfp4_packed.value_or(layer.device().is_cuda()));
  return routed;
}

}  // namespace

void resolve_gpt_oss(const ConfigReader& config_json, ModelConfig& c) {
  resolve_llama_common(config_json, c, {201088, 2880, 2880, 36, 64, 8, 64, 131072, 1e-5});
  // The experts hard-code their activation; hidden_act names one nothing uses.
  c.features.activation = Activation::kClampedSwiglu;
  c.features.attention_sinks = true;
  c.qkv_bias = c.output_bias = config_json.read<bool>("attention_bias").value_or(true);
  c.routed_experts.experts = read_expert_count(config_json, 128);
  c.routed_experts.top_k = config_json.read<int64_t>("num_experts_per_tok").value_or(4);
  c.routed_experts.intermediate_size = c.intermediate_size;
  c.routed_experts.scoring = RouterScoring::kTopKSoftmax;
  c.routed_experts.swiglu_limit = config_json.read<double>("swiglu_limit").value_or(7.0);
  const double alpha = config_json.read<double>("swiglu_alpha").value_or(1.702);
  if (alpha != 1.702) fail("{} is {}; only gpt-oss's 1.702 is supported", config_json.where("swiglu_alpha"), alpha);
  if (!(c.routed_experts.swiglu_limit > 0)) fail("{} must be positive", config_json.where("swiglu_limit"));
  const RopeSpec rope = resolve_gpt_oss_rope(config_json, c.head_dim);
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{0, rope, FeedForward::kRoutedExperts});
  std::vector<bool> sliding = sliding_from_layer_types(config_json, c.num_layers);
  if (sliding.empty()) {
    for (int64_t i = 0; i < c.num_layers; ++i) sliding.push_back(i % 2 == 0);
  }
  const Field<int64_t> window = config_json.read<int64_t>("sliding_window");
  apply_sliding_windows(c, sliding, window.present ? window.value_or(0) : 128);
}

void load_gpt_oss(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights) {
  const WeightScope model(checkpoint, "model.", plan.device, plan.dtype);
  weights.embed_tokens = load_token_embeddings(model, "embed_tokens.weight", config, plan);
  load_layers(model.sub("layers"), plan, weights, [&](const WeightScope& layer, int64_t i, LayerWeights& l) {
    load_llama_layer(layer, config, i, l, [&](const WeightScope& scope) { return load_gpt_oss_experts(scope, config, plan); });
    // Softmax logits: fp32 whatever the compute dtype.
    l.attention_sinks = layer.get("self_attn.sinks", {config.num_heads}, at::kFloat);
  });
  if (plan.final_norm) weights.final_norm = load_norm(model, "norm", config.hidden_size, config);
  load_lm_head(checkpoint, {"lm_head.weight"}, config, plan, weights);
}

}  // namespace probekit::model
