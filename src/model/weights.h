// Checkpoint weights: the tensors of one or several safetensors shards behind one name index, read through a
// scoped accessor that checks each tensor's shape and names it (and its file) in every error, converting
// tensors to the target device and dtype one at a time (peak host memory is one tensor, never a model copy).
// The checkpoint's files are in weights.cpp, the scoped accessor in weight_scope.cpp, Linear and its product in
// linear.cpp.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <thread>
#include <variant>
#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/torch/transfers.h"
#include "io/safetensors.h"
#include "model/config.h"

namespace probekit::model {

/// A checkpoint without the LM head a load asked for (saved without it, and config.json does not tie it to the
/// token embeddings): callers that can do without the head say how.
class MissingLmHead : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The ATen dtype of a safetensors dtype.
at::ScalarType aten_dtype(safetensors::DType dtype);

/// The safetensors files of a checkpoint directory and where each tensor lives.
class Checkpoint {
 public:
  /// Opens DIR/model.safetensors, or the shards listed by DIR/model.safetensors.index.json; a missing shard
  /// or a name the index places in a shard that lacks it is an error naming both files. Weights stored as
  /// `quantization` says (the model's config) are decoded on load.
  /// FP8 weights read through WeightScope::get_linear stay packed when `keep_fp8_packed` (unset: on CUDA devices),
  /// and keep their block scales for products in FP8 when `fp8_block_products` (LoadOptions says when).
  static Checkpoint open(const std::string& dir, Quantization quantization = {},
                         std::optional<bool> keep_fp8_packed = std::nullopt,
                         bool fp8_block_products = false);

  struct Entry {
    const safetensors::File* file = nullptr;
    const safetensors::TensorInfo* info = nullptr;
  };
  std::optional<Entry> find(const std::string& name) const;
  const std::string& dir() const { return dir_; }
  /// Where a missing tensor would have been looked for, for error messages.
  std::string describe_files() const;
  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  int64_t parameter_count() const;
  /// The dtype holding most parameters ("BF16").
  std::string dominant_dtype() const;
  /// A SHA-256 over config.json and every weight file's header (names, dtypes, shapes, offsets): what tells
  /// one checkpoint from another without reading the weights. Probes record it to refuse another model.
  std::string fingerprint() const;
  /// The files and byte ranges of the tensors `wanted` accepts, merged where adjacent, in file order.
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> byte_ranges(
      const std::function<bool(const std::string&, const safetensors::TensorInfo&)>& wanted) const;
  /// Bytes of the tensors WeightScope::get has loaded from this checkpoint (in their target dtype): what a
  /// model's weights occupy on its device, whichever tensors its family reads.
  int64_t loaded_bytes() const { return loaded_bytes_; }
  /// Frees the pinned buffers loads to a CUDA device went through (once the model is loaded).
  void finish_uploads() const { uploads_.reset(); }

 private:
  friend class WeightScope;
  /// A copy of `host` (a view of the memory map) on `device` in `dtype`.
  at::Tensor load(const at::Tensor& host, at::Device device, at::ScalarType dtype) const;

  std::string dir_;
  Quantization quantization_;
  std::optional<bool> keep_fp8_packed_;
  bool fp8_block_products_ = false;
  mutable int64_t loaded_bytes_ = 0;
  mutable std::unique_ptr<device::StagedUpload> uploads_;
  std::vector<std::unique_ptr<safetensors::File>> files_;
  std::map<std::string, Entry> index_;
};

/// Reads byte ranges of files in background threads, so that a model's weights come from disk with many
/// requests in flight (a single thread faulting pages of the memory map in one at a time reads a cold file
/// several times slower). The loader, following behind, then finds its pages in the page cache. Chunks already
/// there (a warm start) are skipped: reading them again would only take memory bandwidth from the upload beside.
class Prefetcher {
 public:
  Prefetcher(std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> ranges, int threads);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

 private:
  std::shared_ptr<std::atomic<bool>> stop_;
  std::vector<std::thread> threads_;
};

/// An MXFP4 weight kept packed on its device (gpt-oss's experts on a GPU), decoded where it is used.
struct Mxfp4Weight {
  at::Tensor blocks;  // [..., out, in / 32, 16] uint8: two e2m1 values a byte, the low nibble first
  at::Tensor scales;  // [..., out, in / 32] uint8: e8m0 exponents, one per 32 inputs

  bool defined() const { return blocks.defined(); }
};

/// A fine-grained FP8 weight kept packed on its device (LoadOptions::keep_fp8_packed), decoded for each product, or
/// multiplied in FP8 where it keeps its block scales (LoadOptions::fp8_block_products).
struct Fp8Weight {
  at::Tensor bytes;       // [out, in] uint8: float8_e4m3fn codes
  at::Tensor row_scales;  // [out, ceil(in / block_in)] fp32: each row's weight_scale_inv along the input
  int64_t block_in = 0;
  at::ScalarType dtype = at::kFloat;  // the compute dtype it is decoded into
  /// [out / 128, in / 128] fp32: weight_scale_inv as stored, where products run in FP8 (fused::fp8_block_linear);
  /// undefined where each product decodes the weight.
  at::Tensor block_scales;

  bool defined() const { return bytes.defined(); }
};

/// A weight-and-bias pair in the reference's [out, in] layout; bias may be undefined. An FP8 weight kept packed
/// is held by `fp8`, and `weight` is undefined.
struct Linear {
  at::Tensor weight;
  at::Tensor bias;
  Fp8Weight fp8;

  bool defined() const { return weight.defined() || fp8.defined(); }
  /// The dtype the product computes in.
  at::ScalarType dtype() const { return fp8.defined() ? fp8.dtype : weight.scalar_type(); }
  /// The weight [out, in] in that dtype (a packed one decoded).
  at::Tensor dense_weight() const;
};

/// x W^T + b; a packed FP8 weight is multiplied in FP8 where it kept its block scales, else decoded for the
/// product into a buffer freed after it.
at::Tensor linear(const at::Tensor& x, const Linear& l);

/// The rows `order` [rows] (int64) of a weight and its bias, packed or not: a packed FP8 weight's bytes and row scales
/// follow its rows, and its block scales where each 128 rows come from one block of 128 (else each product decodes).
Linear rows_selected(const Linear& l, const at::Tensor& order);

/// Weights stacked along the output in order (their biases are the caller's): packed FP8 where every part is (block
/// scales where every part has them), else every part as its dense weight.
Linear stacked(const std::vector<Linear>& parts);

/// A prefix into a checkpoint ("model.layers.3.") plus the device and dtype tensors are loaded to.
class WeightScope {
 public:
  WeightScope(const Checkpoint& checkpoint, std::string prefix, at::Device device, at::ScalarType dtype);

  WeightScope sub(const std::string& name) const;
  WeightScope sub(int64_t index) const;
  /// The same scope loading onto another device (a decoder layer of a model split over devices).
  WeightScope on(at::Device device) const;
  std::string full_name(const std::string& name) const { return prefix_ + name; }
  bool contains(const std::string& name) const;

  /// Loads a tensor in the scope's dtype; throws naming tensor and file if absent or of another shape.
  at::Tensor get(const std::string& name, const std::vector<int64_t>& shape) const;
  /// Same, in an explicit dtype (norm weights that the reference applies in fp32).
  at::Tensor get(const std::string& name, const std::vector<int64_t>& shape, at::ScalarType dtype) const;
  /// The tensor as stored, checking its shape: a CPU tensor viewing the checkpoint's memory map, valid while
  /// the checkpoint is open. Nothing is read until its elements are.
  at::Tensor view(const std::string& name, const std::vector<int64_t>& shape) const;
  /// An MXFP4 weight of `shape` [..., out, in] (quant_method mxfp4): NAME_blocks [..., out, in / 32, 16] and
  /// NAME_scales [..., out, in / 32], uint8, decoded and loaded in the scope's dtype.
  at::Tensor get_mxfp4(const std::string& name, const std::vector<int64_t>& shape) const;
  /// The same weight kept packed: its blocks and scales (checked) loaded as they are, uint8, onto the device.
  Mxfp4Weight get_mxfp4_packed(const std::string& name, const std::vector<int64_t>& shape) const;
  /// The projection whose weight is the checkpoint's `parts` (NAME.weight [out, in] each, with NAME.bias [out]
  /// when `bias`) stacked along the output in order. FP8 weights stay packed where the checkpoint says so (see
  /// Checkpoint::open); anything else is loaded as get() loads it.
  Linear get_linear(const std::vector<std::pair<std::string, int64_t>>& parts, int64_t in, bool bias = false) const;
  /// Loads a tensor if present (its presence selects a feature), checking its shape.
  std::optional<at::Tensor> get_optional(const std::string& name, const std::vector<int64_t>& shape) const;

  at::Device device() const { return device_; }
  at::ScalarType dtype() const { return dtype_; }

 private:
  /// The entry of a floating-point tensor of this shape; throws naming the tensor and its file otherwise.
  Checkpoint::Entry checked_entry(const std::string& name, const std::vector<int64_t>& shape) const;
  /// A uint8 part of an MXFP4 weight (its blocks or scales) of this shape, viewed in the memory map.
  at::Tensor mxfp4_part(const std::string& name, const std::vector<int64_t>& shape) const;
  /// The blocks and scales of an MXFP4 weight of `shape` [..., out, in], viewed in the memory map, checked.
  Mxfp4Weight mxfp4_parts(const std::string& name, const std::vector<int64_t>& shape) const;
  /// A float8_e4m3fn weight's weight_scale_inv blocks [ceil(out / B0), ceil(in / B1)], viewed in the memory map.
  at::Tensor fp8_scales(const std::string& name, const Checkpoint::Entry& entry) const;
  /// A float8_e4m3fn weight times its weight_scale_inv blocks, in float32 on the host.
  at::Tensor dequantized_fp8(const std::string& name, const Checkpoint::Entry& entry) const;
  /// The same weight kept packed on the scope's device.
  Fp8Weight packed_fp8(const std::string& name, const Checkpoint::Entry& entry) const;
  /// Whether a packed FP8 weight [out, in] keeps its block scales for products in FP8.
  bool fp8_block_products(int64_t out, int64_t in) const;

  const Checkpoint* checkpoint_;
  std::string prefix_;
  at::Device device_;
  at::ScalarType dtype_;
};

/// A normalization layer's parameters. Gemma's (1 + w) is folded into `weight` at load time.
struct Norm {
  at::Tensor weight;
  at::Tensor bias;  // LayerNorm only

  bool defined() const { return weight.defined(); }
};

/// A dense feed-forward.
struct DenseMlp {
  Linear in;  // gated MLPs: gate and up fused as [2 * intermediate, hidden]; else fc [intermediate, hidden]
  Linear out;
};

/// Routed experts (Mixtral, Qwen MoE, gpt-oss), each a gated MLP, stacked so that one grouped product serves all
/// of them.
struct RoutedExperts {
  at::Tensor router;   // [experts, hidden]; fp32 where the router runs in fp32 (DeepSeek V3)
  at::Tensor router_bias;  // [experts] (gpt-oss); undefined elsewhere
  at::Tensor score_correction_bias;  // [experts] fp32: added to the scores for choosing only (DeepSeek V3)
  at::Tensor gate_up;  // [experts, 2 * intermediate, hidden]: each expert's gate and up projections
  at::Tensor down;     // [experts, hidden, intermediate]
  at::Tensor gate_up_bias, down_bias;  // [experts, 2 * intermediate] and [experts, hidden] (gpt-oss); or undefined
  // MXFP4 experts kept packed (LoadOptions::keep_mxfp4_packed), in place of gate_up and down (then undefined):
  // each batch decodes its layer's experts, all at once for one grouped product on Hopper, else one at a time.
  Mxfp4Weight gate_up_mxfp4, down_mxfp4;
  // FP8 experts kept packed (LoadOptions::keep_fp8_packed), likewise: bytes [experts, out, in] and row scales
  // [experts, out, ceil(in / block_in)], decoded as MXFP4 experts are.
  Fp8Weight gate_up_fp8, down_fp8;
  DenseMlp shared_expert;         // Qwen 2 MoE, DeepSeek V3: taken by every token; empty otherwise
  at::Tensor shared_expert_gate;  // [1, hidden]: the shared expert's output is scaled by sigmoid(gate x); or none
};

/// A Gated DeltaNet layer's weights (Qwen3-Next, Qwen3.5); its out_proj is the layer's attention_output.
struct DeltaNetWeights {
  /// [2 * key_dim + 2 * value_dim + 2 * value_heads, hidden]: the rows of q, k, v (the convolution's channels),
  /// then z (the output gate), b (beta's) and a (the decay's), whatever order the checkpoint stores them in.
  Linear in_proj;
  at::Tensor conv;             // [conv_channels, kernel] in fp32: conv1d.weight, one filter per channel
  at::Tensor A_log, dt_bias;   // [value_heads] in fp32
  at::Tensor norm;             // [value_head_dim] in fp32: the output's RMSNorm weight, w itself (not 1 + w)
};

/// A multi-head latent attention layer's weights (DeepSeek V3); its o_proj is the layer's attention_output. Within
/// each head's rope dimensions the checkpoint's interleaved pairs (rope_interleave) are reordered at load into
/// rotate-half's halves: queries and keys permuted alike keep their products, and the runtime rope stays one.
struct LatentAttentionWeights {
  /// The projections of x, fused along the output: q_a_proj [q_lora_rank] (or q_proj [heads * qk_head_dim] without
  /// a query bottleneck), then kv_a_proj_with_mqa [kv_lora_rank + rope_head_dim]: the latent, then the rope key.
  Linear down;
  Norm q_a_norm;  // q_a_layernorm [q_lora_rank]; undefined without a query bottleneck
  Linear q_b;     // q_b_proj [heads * qk_head_dim, q_lora_rank]; undefined without a query bottleneck
  Norm kv_a_norm; // kv_a_layernorm [kv_lora_rank]
  Linear kv_b;    // kv_b_proj [heads * (nope_head_dim + value_head_dim), kv_lora_rank]: per head k_nope rows, v rows
};

struct LayerWeights {
  Norm attention_input_norm, attention_output_norm, mlp_input_norm, mlp_output_norm;
  Linear qkv;  // q, k and v projections fused along the output dimension: [q_out + 2 * kv_out, hidden]
  Linear attention_output;
  Linear attention_gate;  // [heads * head_dim, hidden]: heads * sigmoid(gate x) before o_proj (Qwen3-Next); or none
  Norm q_norm, k_norm;
  at::Tensor attention_sinks;  // [heads] fp32: each head's logit in the softmax's denominator (gpt-oss)
  DeltaNetWeights delta_net;  // Mixer::kGatedDeltaNet layers (which have no qkv)
  LatentAttentionWeights latent_attention;  // Mixer::kLatentAttention layers (which have no qkv)
  std::variant<DenseMlp, RoutedExperts> feed_forward;  // the one LayerSpec::feed_forward names
  // Gemma 4: the per-layer input's gate [size, hidden] and projection [hidden, size], its branch's post-norm, and
  // the scalar [1] the layer's output is multiplied by; undefined elsewhere.
  Linear per_layer_input_gate, per_layer_projection;
  Norm post_per_layer_input_norm;
  at::Tensor layer_scalar;
};

struct ModelWeights {
  at::Tensor embed_tokens;         // [vocab, hidden]; on the host in the file's dtype with LoadPlan::embeddings_on_host
  at::Tensor position_embeddings;  // [max_positions, hidden], learned positions only
  std::vector<LayerWeights> layers;
  Norm final_norm;
  // Gemma 4's per-layer inputs: the table [per_layer_input_vocab, layers * size], the embeddings' projection
  // [layers * size, hidden] and its norm [size].
  at::Tensor embed_tokens_per_layer, per_layer_model_projection;
  Norm per_layer_projection_norm;
  at::Tensor lm_head;  // [vocab, hidden]; generation only (the embedding table itself when tied)
};

}  // namespace probekit::model
