// The Gated DeltaNet token mixer of Qwen3-Next's and Qwen3.5's linear_attention layers: a causal depthwise
// convolution over q, k and v, then per value head a state S [key_head_dim, value_head_dim] that decays and is
// corrected towards each token's value (the gated delta rule), read by the queries; the output is RMS-normalized
// per head, gated by silu(z) and projected back. Its past is a fixed-size state, not cached keys and values.
#pragma once

#include <ATen/ATen.h>

#include "model/config.h"
#include "model/decoder_block.h"
#include "model/weights.h"

namespace probekit::model {

/// The gated delta rule's outputs [B, H, T, dv] and final state [B, H, dk, dv], in fp32.
struct DeltaRuleResult {
  at::Tensor outputs, state;
};

/// The gated delta rule token by token, per head with state S (`initial` [B, H, dk, dv]):
///   S <- exp(g_t) S;  S <- S + k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T q_t.
/// q, k [B, H, T, dk] (q already scaled), v [B, H, T, dv], g (the log decay, <= 0) and beta [B, H, T], all fp32.
/// With `commit` ([B] int64) the state returned is the one after each row's first commit[b] tokens (the outputs
/// are still those of every token); undefined: after all of them.
DeltaRuleResult gated_delta_rule_recurrent(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                           const at::Tensor& g, const at::Tensor& beta, const at::Tensor& initial,
                                           const at::Tensor& commit = {});

/// The same numbers (up to rounding) computed a chunk of tokens at a time, as transformers' prefill does: within a
/// chunk the corrections come from one triangular solve and a few matrix products, so the sequential steps are
/// T / chunk_size rather than T.
DeltaRuleResult gated_delta_rule_chunked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& g, const at::Tensor& beta, const at::Tensor& initial,
                                         const at::Tensor& commit = {}, int64_t chunk_size = 64);

/// What a Gated DeltaNet layer carries from one pass to the next, per row: the convolution's last K - 1 inputs
/// [B, channels, K - 1] (compute dtype) and the delta rule's state [B, value_heads, dk, dv] (fp32).
struct DeltaNetState {
  at::Tensor conv, recurrent;
};

/// The mixer's heads [B, T, value_dim] (before out_proj, in projected's dtype) from the input projection
/// projected [B, T, P] (q k v z b a). With `state` each row starts from it and it is left as it stands after the
/// row's first commit [b] tokens (`commit` [B] int64; undefined: all T); without, each row starts from zeros. On a
/// GPU the kernels of fused::delta_net_heads compute it where they take the heads; elsewhere ATen operations and
/// gated_delta_rule_chunked.
at::Tensor delta_net_heads(const at::Tensor& projected, const DeltaNetWeights& w, const ModelConfig& c,
                           DeltaNetState* state, const at::Tensor& commit);

/// The same for packed sequences: projected [1, N, P] holds the sequences of `packed` one after another, each from
/// zeros.
at::Tensor packed_delta_net_heads(const at::Tensor& projected, const PackedSequences& packed, const DeltaNetWeights& w,
                                  const ModelConfig& c);

/// The Gated DeltaNet sub-block's output [B, T, hidden] for its input x_in (the normalized stream, compute dtype),
/// at the tokens `output_rows` only when defined. With generation's cache (context.cache()) it starts from the
/// layer's states there and leaves them after each row's committed tokens (AttentionContext::commit_tokens).
at::Tensor delta_net_branch(const at::Tensor& x_in, const LayerWeights& w, const ModelConfig& c, int64_t layer,
                            const AttentionContext& context, const at::Tensor& output_rows);

}  // namespace probekit::model
