#include "model/model_summary.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/activation.h"
#include "model/weights.h"

namespace probekit::model {

namespace {

std::string rope_summary(const RopeSpec& rope, bool learned_positions) {
  switch (rope.type) {
    case RopeType::kNone: return learned_positions ? "learned positions" : "no position embedding (NoPE)";
    case RopeType::kDefault: return fmt::format("rope theta {:g} on {} dims", rope.theta, rope.rotary_dim);
    case RopeType::kLinear:
      return fmt::format("rope theta {:g} on {} dims, linear scaling x{:g}", rope.theta, rope.rotary_dim, rope.factor);
    case RopeType::kLlama3:
      return fmt::format("rope theta {:g} on {} dims, llama3 scaling x{:g}", rope.theta, rope.rotary_dim, rope.factor);
    case RopeType::kLongRope:
      return fmt::format("rope theta {:g} on {} dims, longrope (long factors beyond {} tokens, attention factor {:g})",
                         rope.theta, rope.rotary_dim, rope.original_max_position_embeddings, rope.attention_factor);
    case RopeType::kYarn:
      return fmt::format("rope theta {:g} on {} dims, yarn x{:g} (from {} tokens, attention factor {:g})", rope.theta,
                         rope.rotary_dim, rope.factor, rope.original_max_position_embeddings, rope.attention_factor);
    case RopeType::kProportional:
      return fmt::format("rope theta {:g} on {} dims, proportional ({:g} of the frequencies turn)", rope.theta,
                         rope.rotary_dim, rope.rotated_fraction);
  }
  return "?";
}

// A layer's token mixer: attention with its window and rope, latent attention with its ranks and rope, or a Gated
// DeltaNet with its heads.
std::string mixer_summary(const ModelConfig& c, size_t i) {
  const LayerSpec& layer = c.layers[i];
  if (layer.mixer == Mixer::kGatedDeltaNet) {
    const LinearAttentionSpec& s = c.linear_attention;
    return fmt::format("Gated DeltaNet ({} key heads of {}, {} value heads of {}, convolution over {} tokens)",
                       s.key_heads, s.key_head_dim, s.value_heads, s.value_head_dim, s.conv_kernel);
  }
  if (layer.mixer == Mixer::kLatentAttention) {
    const LatentAttentionSpec& s = c.latent_attention;
    return fmt::format("latent attention (queries {}, keys and values from a {}-wide latent, heads of {} + {} rope "
                       "dims, values of {}; cached per token: the latent and one rope key), softmax scale {:.4g}, {}",
                       s.q_lora_rank > 0 ? fmt::format("through rank {}", s.q_lora_rank) : std::string("from q_proj"),
                       s.kv_lora_rank, s.nope_head_dim, s.rope_head_dim, s.value_head_dim, c.attention_scale,
                       rope_summary(layer.rope, c.features.learned_positions));
  }
  std::string kind = (layer.sliding_window > 0 ? fmt::format("sliding window {}", layer.sliding_window) : "full attention") +
                     (c.features.attention_sinks ? " with sinks" : "") + ", " +
                     rope_summary(layer.rope, c.features.learned_positions);
  return c.features.attention_output_gate ? kind + ", gated output" : kind;
}

std::string routing_summary(const RoutedExpertsSpec& moe) {
  std::string scoring;
  if (moe.scoring == RouterScoring::kTopKSoftmax) scoring = ", softmax over the top logits";
  if (moe.scoring == RouterScoring::kSigmoidGroupedTopK) {
    scoring = fmt::format(", sigmoid scores with a correction bias, within the best {} of {} groups", moe.top_groups,
                          moe.groups);
  }
  return fmt::format("routed experts (top {} of {}{}{}{}{})", moe.top_k, moe.experts, scoring,
                     moe.normalize_top_k ? ", renormalised" : "",
                     moe.routed_scaling_factor != 1.0 ? fmt::format(", scaled by {:g}", moe.routed_scaling_factor) : "",
                     moe.shared_expert_intermediate_size > 0 ? ", plus a shared expert" : "");
}

std::string quantization_summary(const Quantization& q) {
  if (!q.block.empty()) {
    return fmt::format("{} ({} blocks; projections kept packed on CUDA devices, routed experts and elsewhere dequantized "
                       "on load)",
                       q.method, fmt::join(q.block, "x"));
  }
  if (q.method == "mxfp4") return "mxfp4 (experts kept packed on CUDA devices, dequantized on load elsewhere)";
  return q.method.empty() ? "none" : q.method + " (dequantized on load)";
}

// Layers that share attention settings are listed together: "0-4, 6-10: sliding window 1024, rope ...".
std::map<std::string, std::vector<int64_t>> layer_kinds(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> kinds;
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const LayerSpec& layer = c.layers[i];
    std::string kind = mixer_summary(c, i);
    if (layer.head_dim > 0 || layer.num_kv_heads > 0) {
      kind += fmt::format(", head dim {}, key/value heads {}", layer_head_dim(c, static_cast<int64_t>(i)),
                          layer_kv_heads(c, static_cast<int64_t>(i)));
    }
    if (layer.feed_forward == FeedForward::kRoutedExperts) kind += ", " + routing_summary(c.routed_experts);
    kinds[kind].push_back(static_cast<int64_t>(i));
  }
  return kinds;
}

}  // namespace

ModelSummary summarize_model(const std::string& dir) {
  ModelSummary s;
  s.dir = dir;
  s.config = load_config(dir);
  Checkpoint checkpoint = Checkpoint::open(dir, s.config.quantization);
  s.parameters = checkpoint.parameter_count();
  s.weights_dtype = checkpoint.dominant_dtype();
  s.quantization = quantization_summary(s.config.quantization);
  s.layer_kinds = layer_kinds(s.config);
  s.cache_bf16 = kv_cache_bytes_per_token(s.config, 2.0);
  return s;
}

Json ModelSummary::to_json() const {
  const ModelConfig& c = config;
  Json kinds = Json::object();
  for (const auto& [kind, layers] : layer_kinds) kinds[kind] = layers;
  Json out = {{"model_type", c.model_type},  {"family", c.text_model_type},     {"layers", c.num_layers},
              {"hidden_size", c.hidden_size}, {"intermediate_size", c.intermediate_size},
              {"attention_heads", c.num_heads}, {"key_value_heads", c.num_kv_heads}, {"head_dim", c.head_dim},
              {"vocab_size", c.vocab_size}, {"parameters", parameters},
              {"weights_dtype", weights_dtype}, {"activation", activation_name(c.features.activation)},
              {"attention", kinds}, {"quantization", quantization}};
  out["kv_cache_bytes_per_token_bf16"] = {{"cached", cache_bf16.cached}, {"expanded", cache_bf16.expanded}};
  const RoutedExpertsSpec& moe = c.routed_experts;
  if (moe.experts > 0) {
    out["routed_experts"] = {{"experts", moe.experts}, {"top_k", moe.top_k},
                             {"intermediate_size", moe.intermediate_size}, {"layers", routed_expert_layers(c)}};
  }
  return out;
}

std::string ModelSummary::to_text() const {
  const ModelConfig& c = config;
  std::string text = fmt::format("model: {}\n", dir);
  text += fmt::format("family: {}{}\n", c.text_model_type,
                      c.model_type != c.text_model_type ? " (text tower of " + c.model_type + ")" : "");
  text += fmt::format("layers: {}\nhidden size: {}\nintermediate size: {}\n", c.num_layers, c.hidden_size,
                      c.intermediate_size);
  text += fmt::format("attention heads: {} (key/value heads: {}, head dim: {})\n", c.num_heads, c.num_kv_heads,
                      c.head_dim);
  text += fmt::format("vocabulary: {}\nactivation: {}\n", c.vocab_size, activation_name(c.features.activation));
  const auto count = static_cast<double>(parameters);
  text += fmt::format("parameters: {} ({})\nweights dtype: {}\n", parameters,
                      count >= 1e9 ? fmt::format("{:.2f} B", count / 1e9) : fmt::format("{:.1f} M", count / 1e6),
                      weights_dtype);
  text += fmt::format("quantization: {}\n", quantization);
  if (c.per_layer_input_size > 0) text += fmt::format("per-layer inputs: {} per layer\n", c.per_layer_input_size);
  for (const auto& [kind, layers] : layer_kinds) text += fmt::format("layers {}: {}\n", fmt::join(layers, ","), kind);
  text += fmt::format("generation cache per token in bf16: {:.0f} bytes{}\n", cache_bf16.cached,
                      cache_bf16.expanded != cache_bf16.cached
                          ? fmt::format(" (expanded keys and values would take {:.0f})", cache_bf16.expanded)
                          : "");
  return text;
}

}  // namespace probekit::model
