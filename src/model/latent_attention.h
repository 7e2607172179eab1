// Multi-head latent attention (DeepSeek V2 and V3): each token's keys and values come from a kv_lora_rank-wide
// latent (kv_a_proj_with_mqa, then kv_a_layernorm), expanded per head by kv_b_proj into the keys' non-rotary part
// and the values, while the keys' rotary part is one rope key all heads share; queries come through a low-rank
// bottleneck (q_a_proj, q_a_layernorm, q_b_proj) or one q_proj. What a token leaves in the generation cache is its
// latent and its rope key, not expanded keys and values; a few tokens over many cached ones then attend in the
// absorbed form: kv_b_proj's key rows folded into the queries and its value rows applied after the attention, so
// every head reads the cached latents themselves (one key/value head of width kv_lora_rank + rope_head_dim).
#pragma once

#include <ATen/ATen.h>

#include "model/config.h"
#include "model/decoder_block.h"
#include "model/weights.h"

namespace probekit::model {

/// The latent attention sub-block's output [B, T, hidden] for its input x_in (the normalized stream, compute dtype),
/// at the tokens `output_rows` only when defined. Records the layer's latents and rope keys into `record`, reads a
/// cached prefix's (context.prefix()), or writes into generation's cache (context.cache()) and attends over it.
at::Tensor latent_attention_branch(const at::Tensor& x_in, const LayerWeights& w, const ModelConfig& c, int64_t layer,
                                   AttentionContext& context, KvCache* record, const at::Tensor& output_rows);

}  // namespace probekit::model
