// The one decoder block every family runs, driven by ArchFeatures and LayerSpec, plus the pieces it is made of
// (norms, rotary embeddings, attention, MLP). In fp32 the numbers are transformers' eager ones. In bf16/fp16
// only the matrix products run in the reduced dtype: the residual stream, norms, rotary embeddings and softmax
// stay in fp32, which keeps bf16 results much closer to the fp32 reference than a pure-bf16 model.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include "model/config.h"
#include "model/stream_writes.h"
#include "model/weights.h"

namespace probekit::model {

/// Called with the values of a forward pass at its sites (sites/sites.h), as the pass reaches them: the embeddings
/// and the final norm with layer -1, the others with their decoder layer. Values are [B, T, width]: fp32 for the
/// residual sites, the router's logits and the experts' rows, the compute dtype for the branches.
using TensorHook = std::function<void(Site site, int64_t layer, const at::Tensor& values)>;

/// Keys and values of every layer of a forward pass (after rotary embedding), [B, kv_heads, T, head_dim] each; for a
/// latent attention layer what it expands them from, its latents [B, 1, T, kv_lora_rank] (keys) and its rope keys
/// [B, 1, T, rope_head_dim] (values); undefined for a Gated DeltaNet layer, which keeps (in generation's cache) its state instead: the last
/// kernel - 1 inputs of its convolution [B, conv_channels, kernel - 1] and its recurrent state
/// [B, value_heads, key_head_dim, value_head_dim] in fp32 (undefined for attention layers).
struct KvCache {
  std::vector<at::Tensor> keys, values;
  std::vector<at::Tensor> conv_states, recurrent_states;
};

/// Sequences packed one after another into a pass of one row [1, N], with no padding: sequence b holds
/// positions [cumulative_lengths[b], cumulative_lengths[b + 1]) and attends only to itself.
struct PackedSequences {
  at::Tensor cumulative_lengths;  // [B + 1] int32 on the model's device
  std::vector<int64_t> lengths;   // [B] on the host
};

/// Whether attention over packed sequences runs as one kernel for this model on `device` in `dtype`: LibTorch's
/// variable-length flash kernel (LibTorch 2.5 on, CUDA compute capability 8.0 on, bf16/fp16, no attention
/// soft-capping, a rope that does not depend on the sequence's length, Gated DeltaNet heads of at most 128; sinks are
/// applied to its output). Elsewhere packed sequences are attended one at a time, which is exact but slower than a
/// padded batch.
bool packed_attention_is_fast(const ModelConfig& config, at::Device device, at::ScalarType dtype);

/// Whether generation's attention over its cache runs fused::cached_attention on every layer for passes of up to
/// `tokens` tokens a row: a CUDA build, attention layers only whose heads the kernel takes
/// (fused::cached_attention_takes), no attention soft-capping. That kernel reads each query's slots up to its position and no further, so such a step need not
/// bound the cache's visible slots for its numbers (generation still bounds them, to choose the kernel:
/// readout::step_visible_slots).
bool cached_attention_is_fused(const ModelConfig& config, at::Device device, at::ScalarType dtype, int64_t tokens);

/// Everything attention needs to know about positions in one forward pass; built once, shared by all layers.
class AttentionContext {
 public:
  /// `positions` [B, T]: absolute position of each token; `prefix` (optional): cached keys/values of positions
  /// [0, P) that batch item b may see up to `prefix_lengths[b]` (exclusive).
  /// `sequence_lengths` [B] (optional): each row's length as a text run alone, by which a length-dependent rope
  /// (longrope) chooses its factors; by default the row's last position + 1.
  /// `packed` (optional): the pass is one row of packed sequences (no prefix then).
  AttentionContext(const ModelConfig& config, const at::Tensor& positions, const KvCache* prefix,
                   const at::Tensor& prefix_lengths, const at::Tensor& sequence_lengths = {},
                   const PackedSequences* packed = nullptr);

  /// Rotary cos/sin tables [B, 1, T, rotary_dim] in fp32 for a layer's rope (computed once per distinct rope).
  const std::pair<at::Tensor, at::Tensor>& rotary(const RopeSpec& rope);
  /// The boolean attention mask [B, 1, T, P + T] for a window (0: none), or undefined when plain causal
  /// attention over the batch's own tokens is exact (the fast path).
  const at::Tensor& mask(int64_t sliding_window);

  /// Generation's cache (ForwardPass::cache): the layers write their keys and values into `cache` at the
  /// slots of their positions and attend over its slots [0, visible); recurrent layers advance their states over
  /// the first `commit_tokens` [B] tokens of each row (ForwardPass::commit_tokens; undefined: all).
  void use_cache(KvCache& cache, int64_t visible, const at::Tensor& commit_tokens = {});

  const KvCache* prefix() const { return prefix_; }
  const PackedSequences* packed() const { return packed_; }
  KvCache* cache() const { return cache_; }
  int64_t cache_visible() const { return cache_visible_; }
  const at::Tensor& commit_tokens() const { return commit_tokens_; }
  const at::Tensor& positions() const { return positions_; }

 private:
  /// The rope's inverse frequencies: [rotary_dim / 2], or [B, 1, rotary_dim / 2] when each row chooses its own.
  at::Tensor inverse_frequencies(const RopeSpec& rope) const;

  const ModelConfig& config_;
  at::Tensor positions_, prefix_lengths_, sequence_lengths_, commit_tokens_;
  const KvCache* prefix_;
  int64_t prefix_tokens_ = 0;  // P: the prefix's positions (its first attention layer's keys)
  const PackedSequences* packed_;
  KvCache* cache_ = nullptr;
  int64_t cache_visible_ = 0;
  std::vector<std::pair<RopeSpec, std::pair<at::Tensor, at::Tensor>>> rotary_;
  std::map<int64_t, at::Tensor> masks_;
};

/// Inverse rotary frequencies [rotary_dim / 2] in fp32, with the rope's scaling applied as transformers does
/// (longrope: with its long factors when `long_sequence`, else its short ones).
at::Tensor rotary_inverse_frequencies(const RopeSpec& rope, at::Device device, bool long_sequence = false);

/// x [B, heads, T, head_dim] with the rotary embedding of tables cos, sin [B, 1, T, rotary_dim] applied (rotate-half)
/// to its first rotary_dim dims; the others pass (partial rotary).
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t rotary_dim);

/// Attention [B, heads, T, dv] of q [B, heads, T, d] over k [B, kv_heads, S, d] and v [B, kv_heads, S, dv] (query
/// head h reads key/value head h / (heads / kv_heads)); mask [B, 1, T, S] (true = attend) or undefined for causal
/// attention over the pass's own tokens; scores soft-capped and sinks [heads] in the denominator where given.
at::Tensor attention(const at::Tensor& q, at::Tensor k, at::Tensor v, const at::Tensor& mask, double scale,
                     const std::optional<double>& softcap, const at::Tensor& sinks);

/// Attention over packed sequences, q [1, heads, N, d], k [1, kv_heads, N, d] and v [1, kv_heads, N, dv]: each
/// sequence attends to itself only, within the window. One variable-length flash kernel where it serves
/// (packed_attention_is_fast), else one sequence at a time.
at::Tensor packed_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const PackedSequences& packed,
                            int64_t sliding_window, double scale, const std::optional<double>& softcap,
                            const at::Tensor& sinks);

/// Writes a pass's keys and values k, v [B, kv_heads, T, width] (each its own width) into generation's cache
/// (context.cache()) at the slots of their positions, and returns the cache's visible slots, which the pass attends to.
std::pair<at::Tensor, at::Tensor> cached_keys_and_values(KvCache& cache, int64_t layer, const at::Tensor& k,
                                                         const at::Tensor& v, const AttentionContext& context);

/// Applies a norm in the family's way (RMSNorm, Gemma's (1 + w) RMSNorm, or LayerNorm), in fp32, returning
/// `output` dtype.
at::Tensor apply_norm(const at::Tensor& x, const Norm& norm, const ModelConfig& config, at::ScalarType output);

/// A norm of `kind` without its weight and bias (TransformerLens' hook_normalized), in fp32.
at::Tensor normalized_before_weight(const at::Tensor& x, NormKind kind, double eps);

/// Gemma 4's per-layer inputs [B, T, layers, per_layer_input_size] in fp32 for `input_ids` [B, T] and their
/// (scaled) embeddings [B, T, hidden]; undefined for a model without them.
at::Tensor per_layer_inputs(const at::Tensor& input_ids, const at::Tensor& embeddings, const ModelWeights& weights,
                            const ModelConfig& config);

/// A dense MLP on x [..., hidden] in the compute dtype.
at::Tensor dense_mlp(const at::Tensor& x, const DenseMlp& mlp, const ModelConfig& config);
/// act(gate) * up of a gated MLP's fused projection [..., 2 * inner] -> [..., inner].
at::Tensor gated_activation(const at::Tensor& gate_up, Activation activation);

/// The fp32 residual stream between layers [B, T, hidden] and, when known, the next layer's input: the stream
/// normalized by that layer's attention input norm, in the compute dtype. On the fused GPU path a layer adds its
/// last branch and normalizes the sum for the next layer in one pass over memory.
struct ResidualStream {
  at::Tensor residual;
  at::Tensor next_input;  // undefined: the next layer normalizes `residual` itself
  at::Tensor per_layer_inputs;  // Gemma 4: [B, T, layers, per_layer_input_size], each layer's own input
};

/// What one decoder layer runs with, beside the stream.
struct LayerPass {
  const LayerWeights& weights;
  const ModelConfig& config;
  int64_t layer;
  AttentionContext& context;
  const Norm& next_norm;  // the next layer's attention input norm: the result then carries its input (or none)
  const TensorHook* hook = nullptr;
  uint32_t hook_sites = 0;  // the sites `hook` is given (site_bit)
  const StreamWrites* writes = nullptr;  // this layer's writes (steering) are applied
  KvCache* record = nullptr;  // keys and values recorded here when given
  at::Tensor output_rows;  // token indices along T: the layer's output holds those tokens only (last_layer_rows)
};

/// Runs decoder layer `pass.layer` on the stream.
ResidualStream decoder_block(const ResidualStream& stream, const LayerPass& pass);

}  // namespace probekit::model
