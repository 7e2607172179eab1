#include "model/latent_attention.h"

#include <limits>
#include <utility>

namespace probekit::model {

namespace {

// q_a_layernorm and kv_a_layernorm are built with DeepseekV3RMSNorm's default epsilon, not rms_norm_eps.
constexpr double kLatentNormEps = 1e-6;

// RMSNorm in fp32, returning `dtype`.
at::Tensor latent_norm(const at::Tensor& x, const Norm& norm, at::ScalarType dtype) {
  at::Tensor x32 = x.to(at::kFloat);
  return (x32 * at::rsqrt(x32.pow(2).mean(-1, true) + kLatentNormEps) * norm.weight).to(dtype);
}

// What a pass's tokens bring: queries [B, heads, T, qk_head_dim], latents [B, 1, T, kv_lora_rank] and rope keys
// [B, 1, T, rope_head_dim], rope applied to the queries' last rope_head_dim dims and to the rope keys.
struct LatentInputs {
  at::Tensor queries, latents, rope_keys;
};

LatentInputs latent_inputs(const at::Tensor& x, const LatentAttentionWeights& w, const ModelConfig& c,
                           const RopeSpec& rope, AttentionContext& context) {
  const LatentAttentionSpec& s = c.latent_attention;
  const int64_t batch = x.size(0), tokens = x.size(1), nope = s.nope_head_dim;
  const int64_t q_out = s.q_lora_rank > 0 ? s.q_lora_rank : c.num_heads * s.qk_head_dim();
  const at::ScalarType compute = x.scalar_type();
  at::Tensor down = linear(x, w.down);  // [B, T, q_out + kv_lora_rank + rope_head_dim]
  at::Tensor q = down.narrow(-1, 0, q_out);
  if (s.q_lora_rank > 0) q = linear(latent_norm(q, w.q_a_norm, compute), w.q_b);
  q = q.view({batch, tokens, c.num_heads, s.qk_head_dim()}).transpose(1, 2);
  at::Tensor latents = latent_norm(down.narrow(-1, q_out, s.kv_lora_rank), w.kv_a_norm, compute).unsqueeze(1);
  at::Tensor rope_keys = down.narrow(-1, q_out + s.kv_lora_rank, s.rope_head_dim).unsqueeze(1);
  const auto& [cos, sin] = context.rotary(rope);
  at::Tensor q_rot = apply_rotary(q.narrow(-1, nope, s.rope_head_dim).to(at::kFloat), cos, sin, s.rope_head_dim);
  rope_keys = apply_rotary(rope_keys.to(at::kFloat), cos, sin, s.rope_head_dim).to(compute);
  return {at::cat({q.narrow(-1, 0, nope), q_rot.to(compute)}, -1), latents, rope_keys};
}

// Keys [B, heads, S, qk_head_dim] and values [B, heads, S, value_head_dim] expanded from latents and rope keys, as
// the reference computes them: kv_b_proj's k_nope and v per head, the shared rope key joining every head's key.
std::pair<at::Tensor, at::Tensor> expanded_keys_and_values(const at::Tensor& latents, const at::Tensor& rope_keys,
                                                           const LatentAttentionWeights& w, const ModelConfig& c) {
  const LatentAttentionSpec& s = c.latent_attention;
  const int64_t batch = latents.size(0), slots = latents.size(2), heads = c.num_heads;
  at::Tensor kv = linear(latents.squeeze(1), w.kv_b)
                      .view({batch, slots, heads, s.nope_head_dim + s.value_head_dim})
                      .transpose(1, 2);
  at::Tensor keys = at::cat({kv.narrow(-1, 0, s.nope_head_dim), rope_keys.expand({batch, heads, slots, s.rope_head_dim})}, -1);
  return {keys, kv.narrow(-1, s.nope_head_dim, s.value_head_dim)};
}

// Per head h, kv_b_proj's rows are W_UK^h [nope, rank] then W_UV^h [v, rank]: q_nope . (W_UK^h c) = (W_UK^h^T
// q_nope) . c, and sum_j p_j W_UV^h c_j = W_UV^h sum_j p_j c_j. So queries [q_latent | q_rot] attend over [c | k_rot]
// with the latents themselves as values: one key/value head for all, nothing expanded per cached slot.
at::Tensor absorbed_attention(const at::Tensor& queries, const at::Tensor& latents, const at::Tensor& rope_keys,
                              const LatentAttentionWeights& w, const ModelConfig& c, const at::Tensor& mask) {
  const LatentAttentionSpec& s = c.latent_attention;
  at::Tensor per_head = w.kv_b.dense_weight().view({c.num_heads, s.nope_head_dim + s.value_head_dim, s.kv_lora_rank});
  at::Tensor key_rows = per_head.narrow(1, 0, s.nope_head_dim), value_rows = per_head.narrow(1, s.nope_head_dim, s.value_head_dim);
  at::Tensor query = at::cat({at::matmul(queries.narrow(-1, 0, s.nope_head_dim), key_rows),
                              queries.narrow(-1, s.nope_head_dim, s.rope_head_dim)}, -1);  // [B, heads, T, rank + rope]
  at::Tensor key = at::cat({latents, rope_keys}, -1);  // [B, 1, S, rank + rope], broadcast over the heads
  at::Tensor scores = at::matmul(query, key.transpose(-2, -1)) * c.attention_scale;
  scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor probabilities = at::softmax(scores, -1, at::kFloat).to(queries.scalar_type());
  return at::matmul(at::matmul(probabilities, latents), value_rows.transpose(1, 2));  // [B, heads, T, v]
}

// The heads [B, heads, T, value_head_dim] of a pass with generation's cache: its latents and rope keys written at
// their positions; a prompt's pass (its tokens fill the visible slots) attends as without a cache, a step's few
// tokens over the many cached ones in the absorbed form.
at::Tensor cached_heads(const LatentInputs& in, const LatentAttentionWeights& w, const ModelConfig& c, int64_t layer,
                        AttentionContext& context) {
  auto [latents, rope_keys] = cached_keys_and_values(*context.cache(), layer, in.latents, in.rope_keys, context);
  const at::Tensor& mask = context.mask(c.layers[static_cast<size_t>(layer)].sliding_window);
  if (in.queries.size(2) < context.cache_visible()) {
    return absorbed_attention(in.queries, latents, rope_keys, w, c, mask);
  }
  auto [keys, values] = expanded_keys_and_values(latents, rope_keys, w, c);
  return attention(in.queries, keys, values, mask, c.attention_scale, std::nullopt, {});
}

}  // namespace

at::Tensor latent_attention_branch(const at::Tensor& x_in, const LayerWeights& w, const ModelConfig& c, int64_t layer,
                                   AttentionContext& context, KvCache* record, const at::Tensor& output_rows) {
  const LayerSpec& spec = c.layers[static_cast<size_t>(layer)];
  const LatentAttentionWeights& weights = w.latent_attention;
  const int64_t batch = x_in.size(0), tokens = x_in.size(1);
  LatentInputs in = latent_inputs(x_in, weights, c, spec.rope, context);
  if (record != nullptr) {
    record->keys.push_back(in.latents);
    record->values.push_back(in.rope_keys);
  }
  at::Tensor heads;  // [B, heads, T, value_head_dim]
  if (context.cache() != nullptr) {
    heads = cached_heads(in, weights, c, layer, context);
  } else {
    at::Tensor latents = in.latents, rope_keys = in.rope_keys;
    if (const KvCache* prefix = context.prefix()) {
      latents = at::cat({prefix->keys.at(static_cast<size_t>(layer)).expand({batch, -1, -1, -1}), latents}, 2);
      rope_keys = at::cat({prefix->values.at(static_cast<size_t>(layer)).expand({batch, -1, -1, -1}), rope_keys}, 2);
    }
    auto [keys, values] = expanded_keys_and_values(latents, rope_keys, weights, c);
    heads = context.packed() != nullptr
                ? packed_attention(in.queries, keys, values, *context.packed(), spec.sliding_window, c.attention_scale,
                                   std::nullopt, {})
                : attention(in.queries, keys, values, context.mask(spec.sliding_window), c.attention_scale, std::nullopt, {});
  }
  at::Tensor flat = heads.transpose(1, 2).reshape({batch, tokens, c.num_heads * c.latent_attention.value_head_dim});
  return linear(output_rows.defined() ? flat.index_select(1, output_rows) : flat, w.attention_output);
}

}  // namespace probekit::model
