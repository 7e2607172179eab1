// A Hugging Face checkpoint loaded for hidden-state extraction: the embeddings, the decoder layers up to the
// deepest one a run needs, and (on request) the final norm; the LM head only for generation.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/decoder_block.h"
#include "model/weights.h"

namespace probekit::model {

struct LoadOptions {
  int64_t last_layer = -1;  // deepest decoder layer to load; -1: all
  bool final_norm = true;   // load the final norm (only meaningful with the last layer loaded)
  /// Leave the token embedding table in the checkpoint's memory map and gather each pass's rows on the host:
  /// a few texts then read a few rows from disk rather than the whole table (1.3 GB for Gemma 3). The numbers
  /// are the same; for inference, where start-up time counts and batches are small.
  bool embeddings_on_host = false;
  /// Also load the LM head (generation; tied heads keep the embedding table on the device, whatever
  /// embeddings_on_host says).
  bool lm_head = false;
  at::Device device = at::kCPU;  // the embeddings' (and with layer_devices empty every layer's) device
  at::ScalarType dtype = at::kFloat;
  /// A model split over devices: the device of each decoder layer [0, last_layer], consecutive layers on one
  /// device forming a stage (see model/placement.h). The hidden state moves to the next stage's device
  /// between layers. Empty: every layer on `device`.
  std::vector<at::Device> layer_devices;
  /// MXFP4 experts (gpt-oss) kept packed and decoded in each batch (true; see RoutedExperts), or dequantized on load
  /// into the dtype (false); unset: packed on CUDA devices, where memory is short. Tests set it on the CPU.
  std::optional<bool> keep_mxfp4_packed;
  /// Fine-grained FP8 projections and experts kept as their bytes and block scales and decoded for each product (or
  /// multiplied in FP8: fp8_block_products) (true), or dequantized on load into the dtype (false); unset: packed on
  /// CUDA devices.
  std::optional<bool> keep_fp8_packed;
  /// Packed FP8 projections of whole 128x128 blocks multiplied in FP8 with their block scales on a Hopper GPU
  /// (true; refused elsewhere), the activations quantized per token per 128 inputs as transformers' FP8Linear does
  /// with its GPU kernels: faster than bf16, but each product is off the dequantized weights' by the activations'
  /// rounding to e4m3 (about 3%, ten times bf16's). False: each product decodes its weight to the dtype, giving the
  /// dequantized weights' numbers.
  bool fp8_block_products = false;
};

/// Reads the weights a load with `options` will need from disk in background threads, from construction until
/// destruction (reading only: device and dtype are not used). Start it before other start-up work (device,
/// probes, tokenizer) so that the work overlaps with the disk, then pass it to TransformerModel::load.
class WeightReadAhead {
 public:
  WeightReadAhead(const std::string& dir, const LoadOptions& options);
  ~WeightReadAhead();
  WeightReadAhead(const WeightReadAhead&) = delete;
  WeightReadAhead& operator=(const WeightReadAhead&) = delete;

  /// The checkpoint it reads, opened once: its fingerprint before the load, and the load itself, use it.
  const std::shared_ptr<const Checkpoint>& checkpoint() const { return checkpoint_; }

 private:
  std::shared_ptr<const Checkpoint> checkpoint_;
  std::unique_ptr<Prefetcher> prefetcher_;
};

/// One forward pass over a right-padded batch.
struct ForwardPass {
  at::Tensor input_ids;  // [B, T] int64 on the model's device
  at::Tensor positions;  // [B, T] int64; undefined: 0..T-1 for every row
  int64_t last_layer = -1;  // stop after this layer; -1: the last loaded one
  bool final_norm = false;  // also apply the final norm after the last layer (emits Site::kFinalNorm)
  const TensorHook* hook = nullptr;
  uint32_t hook_sites = kAllSites;    // which sites the hook is given (site_bit)
  const StreamWrites* writes = nullptr;  // steering: written into the stream where the pass reaches each site
  KvCache* record = nullptr;          // filled with every layer's keys and values
  const KvCache* prefix = nullptr;    // cached keys/values of positions [0, P) of a shared prefix ([1, ...] each)
  at::Tensor prefix_lengths;          // [B]: how many prefix positions row b may attend to
  // [B]: each row's length as a text run alone (prefix and its own real tokens), by which a rope that depends
  // on the length (longrope) chooses its factors; undefined: each row's last position + 1.
  at::Tensor sequence_lengths;
  // When set, input_ids [1, N] (and positions, which restart at 0 for each sequence) hold these sequences one
  // after another: nothing is padded (no prefix then).
  const PackedSequences* packed = nullptr;
  // Generation's cache, [B, kv_heads, capacity, head_dim] per layer, each key and value at the slot of its
  // position: the pass writes its own keys and values at slots `positions` (in place, no copy of the cache) and
  // each token attends to the slots up to its own position (within a sliding window). Slots from
  // `cache_visible` on, which must exceed every position of the pass, are not read.
  KvCache* cache = nullptr;
  int64_t cache_visible = 0;
  // With a cache, the Gated DeltaNet layers' states there advance over the first commit_tokens[b] tokens of row b
  // only ([B] int64 on the model's device): a prompt without its padding, a step's new token without the probes'
  // suffix after it, nothing for a row that has stopped. The other tokens see the states but leave them as they
  // were. Undefined: every token commits.
  at::Tensor commit_tokens;
  // When set ([R] int64 token indices of a packed pass [1, N]), the last layer finishes only these tokens: its
  // keys and values come from every token, but its output projection, MLP and residual adds run on R rows, and
  // its sites from attn_out on hold [1, R, width]. The last token of each text, read at the deepest
  // layer, needs nothing more; that layer's MLP over the other tokens would be thrown away.
  at::Tensor last_layer_rows;
  // Record the autograd graph (outside InferenceMode), so that the output can be differentiated with respect to
  // tensors of `writes` that require gradients (attribution patching); the fused GPU kernels step aside then.
  bool gradients = false;
};

/// The bytes one token adds to the generation cache, summed over the layers: as this runtime caches it (`cached`:
/// latent attention's latent and rope key), and as keys and values expanded per head would take (`expanded`: what
/// transformers' cache holds for latent attention); the same for plain attention, 0 for Gated DeltaNet layers.
struct CacheBytesPerToken {
  double cached = 0, expanded = 0;
};

class TransformerModel {
 public:
  /// Loads config.json and the needed weights of the checkpoint in `dir`, reading ahead itself unless the
  /// caller started `read_ahead` for the same options.
  static TransformerModel load(const std::string& dir, const LoadOptions& options,
                               const WeightReadAhead* read_ahead = nullptr);

  const ModelConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  at::Device device() const { return options_.device; }
  /// The device of decoder layer `layer` (another than device() in a model split over devices).
  at::Device layer_device(int64_t layer) const {
    return options_.layer_devices.empty() ? options_.device : options_.layer_devices.at(static_cast<size_t>(layer));
  }
  at::ScalarType dtype() const { return options_.dtype; }
  int64_t loaded_layers() const { return static_cast<int64_t>(weights_.layers.size()); }
  bool has_final_norm() const { return weights_.final_norm.defined(); }
  bool has_lm_head() const { return weights_.lm_head.defined(); }
  /// Bytes the loaded weights occupy on the device (a table left in the memory map not counted).
  int64_t weight_bytes() const { return weight_bytes_; }

  /// Runs the pass and returns the residual stream after its last layer (or the final norm) [B, T, hidden].
  at::Tensor forward(const ForwardPass& pass) const;

  /// The next-token logits [..., vocab] in fp32 of final-norm outputs [..., hidden] (soft-capped where the
  /// model caps them); needs the LM head loaded.
  at::Tensor logits(const at::Tensor& final_norm) const;

  /// A generation cache of `batch` rows, zeros on each layer's device: keys and values [batch, kv_heads,
  /// capacity, head_dim] of the attention layers in the model's dtype, and the states of the Gated DeltaNet layers
  /// (empty ones: the state before any token).
  KvCache empty_cache(int64_t batch, int64_t capacity) const;

  /// The standard deviation of the token embedding table's entries as the residual stream receives them (scaled
  /// where the family scales its embeddings): the unit of ROME's noise corruption.
  double embedding_std() const;

  /// Throws if a token id is outside the vocabulary, a position past a learned-position table, or attention over the
  /// sequence would take half of the device's memory or more (attention_past_memory).
  void check_inputs(const std::vector<int32_t>& ids) const;

  /// kv_cache_bytes_per_token in the model's dtype.
  CacheBytesPerToken kv_cache_bytes_per_token() const;

 private:
  /// The residual stream's input for `input_ids`: token embeddings in fp32 [B, T, hidden] on the model's device.
  at::Tensor embed(const at::Tensor& input_ids) const;

  std::string dir_;
  ModelConfig config_;
  LoadOptions options_;
  std::shared_ptr<const Checkpoint> mapped_;  // kept open while weights view its memory map
  ModelWeights weights_;
  int64_t weight_bytes_ = 0;
};

/// The bytes of layer `layer`'s part of a generation cache of `batch` rows and `capacity` positions whose keys
/// and values take `element_size` bytes each (the states of a Gated DeltaNet layer, whatever the capacity; a latent
/// attention layer's latent and rope key per position).
double layer_cache_bytes(const ModelConfig& config, int64_t layer, double batch, double capacity, double element_size);

/// Attention over one sequence too long for the memory of a device that holds every head's [T, T] scores in fp32.
struct AttentionMemory {
  double needed = 0, memory = 0;  // bytes the sequence's attention needs; the device's memory
  int64_t fitting_tokens = 0;     // the longest sequence whose attention needs at most a quarter of it
};
/// On the CPU and MPS (which shares the system's memory), attention holds the scores, their softmax and a masked
/// copy of every head's [T, T]: for a sequence of `tokens` whose attention needs half of the memory or more, what
/// it needs; otherwise, and on CUDA (memory-efficient kernels), nothing.
std::optional<AttentionMemory> attention_past_memory(const ModelConfig& config, const at::Device& device, int64_t tokens);

/// CacheBytesPerToken of a model whose cache holds `element_size`-byte values.
CacheBytesPerToken kv_cache_bytes_per_token(const ModelConfig& config, double element_size);

/// The checkpoint tensors a load with `options` reads from disk (what WeightReadAhead fetches), by name.
std::vector<std::string> tensors_to_read(const std::string& dir, const LoadOptions& options);

}  // namespace probekit::model
