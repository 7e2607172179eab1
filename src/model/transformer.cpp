#include "model/transformer.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/interrupt.h"
#include "device/torch/gpu_utils.h"
#include "device/torch/row_stable.h"
#include "model/families.h"
#include "model/quantization.h"

namespace probekit::model {

namespace {

// Whether a load with `options` reads tensor `name`: its family places it in a decoder layer up to the last
// one needed, or among the other tensors it reads (a token embedding table kept on the host is read lazily).
bool loaded_by(const Family& family, const std::string& name, const safetensors::TensorInfo& info, const ModelConfig& c,
               const LoadOptions& options) {
  int64_t last = options.last_layer < 0 ? c.num_layers - 1 : options.last_layer;
  int64_t layer = family.tensor_layer(name);
  if (layer == kUnusedTensor) return false;
  if (layer == kLmHeadTensor) return options.lm_head && !c.tie_word_embeddings;
  if (layer >= 0) return layer <= last;
  const bool table_on_host = options.embeddings_on_host && !options.lm_head;
  return !(table_on_host && info.shape == std::vector<int64_t>{c.vocab_size, c.hidden_size});
}

std::unique_ptr<Prefetcher> start_read_ahead(const Checkpoint& checkpoint, const ModelConfig& c, const LoadOptions& options) {
  const Family& family = *find_family(c.model_type);
  return std::make_unique<Prefetcher>(
      checkpoint.byte_ranges([&](const std::string& name, const safetensors::TensorInfo& info) {
        return loaded_by(family, name, info, c, options);
      }),
      8);
}

// Products in FP8 asked for where they cannot run are refused before anything is read, whatever the checkpoint.
void check_fp8_block_products(const LoadOptions& options) {
  if (!options.fp8_block_products) return;
  std::vector<at::Device> devices = options.layer_devices;
  devices.push_back(options.device);
  for (const at::Device& device : devices) {
    if (!fp8_block_products_run_on(device, options.dtype)) {
      fail_usage("FP8 products in FP8 (--fp8-products fp8) need a Hopper GPU (compute capability 9.x) with a LibTorch "
                 "that has block-scaled FP8 products, computing in bf16 or fp16: not {} in {}",
                 device.str(), c10::toString(options.dtype));
    }
  }
}

}  // namespace

WeightReadAhead::WeightReadAhead(const std::string& dir, const LoadOptions& options) {
  // The config first: a checkpoint it refuses (a quantization not read) reads nothing.
  const ModelConfig config = load_config(dir);
  checkpoint_ = std::make_shared<const Checkpoint>(Checkpoint::open(dir, config.quantization, options.keep_fp8_packed,
                                                                     options.fp8_block_products));
  prefetcher_ = start_read_ahead(*checkpoint_, config, options);
}

WeightReadAhead::~WeightReadAhead() = default;

std::vector<std::string> tensors_to_read(const std::string& dir, const LoadOptions& options) {
  Checkpoint checkpoint = Checkpoint::open(dir);
  ModelConfig c = load_config(dir);
  std::vector<std::string> names;
  for (const std::string& name : checkpoint.names()) {
    if (loaded_by(*find_family(c.model_type), name, *checkpoint.find(name)->info, c, options)) names.push_back(name);
  }
  return names;
}

TransformerModel TransformerModel::load(const std::string& dir, const LoadOptions& options,
                                        const WeightReadAhead* read_ahead) {
  check_fp8_block_products(options);
  TransformerModel model;
  model.dir_ = dir;
  model.config_ = load_config(dir);
  model.options_ = options;
  const ModelConfig& c = model.config_;
  int64_t last = options.last_layer < 0 ? c.num_layers - 1 : options.last_layer;
  if (last >= c.num_layers) {
    fail_input("layer {} is out of range: the model has {} layers (0 to {})", last, c.num_layers, c.num_layers - 1);
  }
  if (options.lm_head && (last != c.num_layers - 1 || !options.final_norm)) {
    fail_input("the LM head needs every layer and the final norm loaded");
  }
  if (!options.layer_devices.empty() && static_cast<int64_t>(options.layer_devices.size()) != last + 1) {
    fail_input("{} layer devices for {} layers", options.layer_devices.size(), last + 1);
  }
  model.options_.embeddings_on_host = options.embeddings_on_host && !options.lm_head;
  LoadPlan plan{last + 1,       options.final_norm, model.options_.embeddings_on_host, options.lm_head, options.device,
                options.dtype, options.layer_devices, options.keep_mxfp4_packed};
  // Not InferenceMode: inference tensors cannot be saved for backward, and a pass with gradients (attribution
  // patching) multiplies by the weights.
  at::NoGradGuard no_gradients;
  std::shared_ptr<const Checkpoint> checkpoint =
      read_ahead != nullptr ? read_ahead->checkpoint()
                            : std::make_shared<const Checkpoint>(Checkpoint::open(dir, c.quantization, options.keep_fp8_packed,
                                                                     options.fp8_block_products));
  std::unique_ptr<Prefetcher> own_read_ahead = read_ahead == nullptr ? start_read_ahead(*checkpoint, c, options) : nullptr;
  find_family(c.model_type)->load(*checkpoint, c, plan, model.weights_);
  checkpoint->finish_uploads();
  model.weight_bytes_ = checkpoint->loaded_bytes();
  if (model.options_.embeddings_on_host) model.mapped_ = std::move(checkpoint);
  return model;
}

at::Tensor TransformerModel::logits(const at::Tensor& final_norm) const {
  if (!has_lm_head()) fail_input("the LM head was not loaded");
  c10::InferenceMode inference_mode(!final_norm.requires_grad());
  at::Tensor logits =
      device::row_stable_linear(final_norm.to(weights_.lm_head.device(), weights_.lm_head.scalar_type()), weights_.lm_head)
          .to(at::kFloat);
  if (config_.final_logit_softcap) {
    const double cap = *config_.final_logit_softcap;
    logits = at::tanh(logits / cap) * cap;
  }
  return logits;
}

KvCache TransformerModel::empty_cache(int64_t batch, int64_t capacity) const {
  const ModelConfig& c = config_;
  const LinearAttentionSpec& s = c.linear_attention;
  KvCache cache;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    auto options = at::TensorOptions().device(layer_device(layer)).dtype(options_.dtype);
    at::Tensor keys, values, conv_state, recurrent_state;
    const Mixer mixer = c.layers[static_cast<size_t>(layer)].mixer;
    if (mixer == Mixer::kGatedDeltaNet) {
      conv_state = at::zeros({batch, s.conv_channels(), s.conv_kernel - 1}, options);
      recurrent_state = at::zeros({batch, s.value_heads, s.key_head_dim, s.value_head_dim}, options.dtype(at::kFloat));
    } else if (mixer == Mixer::kLatentAttention) {
      // Each token's latent and rope key, from which its keys and values are expanded.
      keys = at::zeros({batch, 1, capacity, c.latent_attention.kv_lora_rank}, options);
      values = at::zeros({batch, 1, capacity, c.latent_attention.rope_head_dim}, options);
    } else {
      keys = at::zeros({batch, layer_kv_heads(c, layer), capacity, layer_head_dim(c, layer)}, options);
      values = at::zeros_like(keys);
    }
    cache.keys.push_back(keys);
    cache.values.push_back(values);
    cache.conv_states.push_back(conv_state);
    cache.recurrent_states.push_back(recurrent_state);
  }
  return cache;
}

double layer_cache_bytes(const ModelConfig& c, int64_t layer, double batch, double capacity, double element_size) {
  const Mixer mixer = c.layers.at(static_cast<size_t>(layer)).mixer;
  if (mixer == Mixer::kGatedDeltaNet) {
    const LinearAttentionSpec& s = c.linear_attention;
    const auto conv = static_cast<double>(s.conv_channels() * (s.conv_kernel - 1)) * element_size;
    const auto recurrent = static_cast<double>(s.value_heads * s.key_head_dim * s.value_head_dim) * 4.0;
    return batch * (conv + recurrent);
  }
  if (mixer == Mixer::kLatentAttention) {
    return batch * capacity * static_cast<double>(c.latent_attention.cached_width()) * element_size;
  }
  return 2.0 * batch * static_cast<double>(layer_kv_heads(c, layer)) * capacity *
         static_cast<double>(layer_head_dim(c, layer)) * element_size;
}

CacheBytesPerToken kv_cache_bytes_per_token(const ModelConfig& c, double element_size) {
  CacheBytesPerToken bytes;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    // A token's part: what a slot more costs (a Gated DeltaNet's states cost the same whatever the length).
    bytes.cached += layer_cache_bytes(c, layer, 1.0, 1.0, element_size) - layer_cache_bytes(c, layer, 1.0, 0.0, element_size);
    const Mixer mixer = c.layers[static_cast<size_t>(layer)].mixer;
    if (mixer == Mixer::kLatentAttention) {
      const LatentAttentionSpec& s = c.latent_attention;
      bytes.expanded += static_cast<double>(c.num_heads * (s.qk_head_dim() + s.value_head_dim)) * element_size;
    } else if (mixer == Mixer::kAttention) {
      bytes.expanded += layer_cache_bytes(c, layer, 1.0, 1.0, element_size);
    }
  }
  return bytes;
}

CacheBytesPerToken TransformerModel::kv_cache_bytes_per_token() const {
  return model::kv_cache_bytes_per_token(config_, static_cast<double>(c10::elementSize(options_.dtype)));
}

double TransformerModel::embedding_std() const {
  c10::InferenceMode inference_mode;
  const double scale = config_.features.scale_embeddings ? std::sqrt(static_cast<double>(config_.hidden_size)) : 1.0;
  // Sums in fp64 (hundreds of millions of entries would lose digits in fp32), a block of rows at a time.
  const at::Tensor& table = weights_.embed_tokens;
  const int64_t rows = table.size(0), block = 8192;
  double sum = 0, squares = 0;
  for (int64_t first = 0; first < rows; first += block) {
    const at::Tensor part = table.narrow(0, first, std::min(block, rows - first)).to(at::kDouble);
    sum += part.sum().item<double>();
    squares += part.square().sum().item<double>();
  }
  const auto n = static_cast<double>(table.numel());
  return std::sqrt(std::max(0.0, (squares - sum * sum / n) / (n - 1))) * scale;
}

void TransformerModel::check_inputs(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= config_.vocab_size) {
      fail_input("token id {} is outside the model's vocabulary of {} (is the tokenizer from another model?)", id,
                 config_.vocab_size);
    }
  }
  if (config_.features.learned_positions && static_cast<int64_t>(ids.size()) > config_.max_positions) {
    // No flag named: the tools that reach this differ in how a text is cut, and say so themselves.
    fail_input("{} tokens exceed the model's {} positions (learned position embeddings, none past them): use a shorter "
               "text",
               ids.size(), config_.max_positions);
  }
  if (const auto past = attention_past_memory(config_, options_.device, static_cast<int64_t>(ids.size()))) {
    // No flag named, as above: a tool that can cut texts says so before the model loads (capture's --max-length).
    fail_input("{} tokens: attention over them needs about {:.0f} GB on the {}, more than half of its {:.0f} GB of "
               "memory: use a shorter text (about {} tokens fit)",
               ids.size(), past->needed / 1e9, options_.device.is_mps() ? "Mac (MPS shares the system's memory)" : "CPU",
               past->memory / 1e9, past->fitting_tokens);
  }
}

std::optional<AttentionMemory> attention_past_memory(const ModelConfig& config, const at::Device& device, int64_t tokens) {
  if (device.is_cuda()) return std::nullopt;
  const double per_square_token = 3.0 * 4.0 * static_cast<double>(config.num_heads);
  const auto length = static_cast<double>(tokens);
  AttentionMemory past;
  past.needed = per_square_token * length * length;
  past.memory = static_cast<double>(device::memory_for_tensors(device));
  if (past.memory <= 0 || past.needed < past.memory / 2) return std::nullopt;
  past.fitting_tokens = static_cast<int64_t>(std::sqrt(past.memory / 4 / per_square_token));
  return past;
}

at::Tensor TransformerModel::embed(const at::Tensor& input_ids) const {
  const at::Tensor& table = weights_.embed_tokens;
  if (!options_.embeddings_on_host) return at::embedding(table, input_ids).to(at::kFloat);
  // The rows are gathered from the memory map in the file's dtype, then rounded to the compute dtype as a copy
  // of the whole table to the device would have been: the same numbers.
  return at::embedding(table, input_ids.to(at::kCPU)).to(options_.dtype).to(input_ids.device()).to(at::kFloat);
}

at::Tensor TransformerModel::forward(const ForwardPass& pass) const {
  // Work without progress reports (a rank's batches, a prompt's pass) stops here on Ctrl-C from the package.
  throw_if_interrupted();
  c10::InferenceMode inference_mode(!pass.gradients);
  at::AutoGradMode gradients(pass.gradients);
  const ModelConfig& c = config_;
  const int64_t batch = pass.input_ids.size(0), tokens = pass.input_ids.size(1);
  int64_t last = pass.last_layer < 0 ? loaded_layers() - 1 : pass.last_layer;
  if (last >= loaded_layers()) fail_input("layer {} was not loaded (loaded: 0 to {})", last, loaded_layers() - 1);
  if (pass.final_norm && !has_final_norm()) fail_input("the final norm was not loaded");
  at::Tensor positions = pass.positions.defined()
                             ? pass.positions
                             : at::arange(tokens, pass.input_ids.options()).unsqueeze(0).expand({batch, tokens});

  // The residual stream is fp32 whatever the compute dtype (see decoder_block.h).
  at::Tensor x = embed(pass.input_ids);
  if (c.features.scale_embeddings) x = x * std::sqrt(static_cast<double>(c.hidden_size));
  if (c.features.learned_positions) x = x + at::embedding(weights_.position_embeddings, positions);
  if (const StreamEdit* edit = pass.writes != nullptr ? pass.writes->find(Site::kEmbeddings, -1) : nullptr) {
    x = edit->apply(x);
  }
  if (pass.hook != nullptr && (pass.hook_sites & site_bit(Site::kEmbeddings)) != 0) (*pass.hook)(Site::kEmbeddings, -1, x);

  auto context = std::make_unique<AttentionContext>(c, positions, pass.prefix, pass.prefix_lengths,
                                                    pass.sequence_lengths, pass.packed);
  if (pass.cache != nullptr) context->use_cache(*pass.cache, pass.cache_visible, pass.commit_tokens);
  c10::OptionalDeviceGuard stage_guard;  // our fused kernels launch on the current device
  std::optional<PackedSequences> stage_packed;  // the packed layout on the current stage's device
  ResidualStream stream{x, {}, per_layer_inputs(pass.input_ids, x, weights_, c)};
  const Norm no_norm;
  at::Tensor last_layer_rows = pass.last_layer_rows;
  for (int64_t layer = 0; layer <= last; ++layer) {
    if (!options_.layer_devices.empty() && layer_device(layer) != stream.residual.device()) {
      // The next stage of a split model: the hidden state and the positions move to its device, where the
      // rotary tables and masks are made again.
      at::Device stage = layer_device(layer);
      stage_guard.reset_device(stage);
      auto on_stage = [&](const at::Tensor& t) { return t.defined() ? t.to(stage) : t; };
      stream = {stream.residual.to(stage), {}, on_stage(stream.per_layer_inputs)};
      if (pass.packed != nullptr) stage_packed = PackedSequences{on_stage(pass.packed->cumulative_lengths), pass.packed->lengths};
      last_layer_rows = on_stage(last_layer_rows);
      context = std::make_unique<AttentionContext>(c, on_stage(positions), pass.prefix, on_stage(pass.prefix_lengths),
                                                   on_stage(pass.sequence_lengths),
                                                   stage_packed ? &*stage_packed : nullptr);
      if (pass.cache != nullptr) context->use_cache(*pass.cache, pass.cache_visible, on_stage(pass.commit_tokens));
    }
    // The next layer's input norm joins this layer's last residual add when both layers share a device.
    const bool next_here = layer < last && layer_device(layer + 1) == layer_device(layer);
    stream = decoder_block(stream, {weights_.layers[static_cast<size_t>(layer)], c, layer, *context,
                                    next_here ? weights_.layers[static_cast<size_t>(layer + 1)].attention_input_norm : no_norm,
                                    pass.hook, pass.hook_sites, pass.writes, pass.record,
                                    layer == last ? last_layer_rows : at::Tensor()});
  }
  x = stream.residual;
  if (pass.final_norm) {
    x = apply_norm(x.to(weights_.final_norm.weight.device()), weights_.final_norm, c, at::kFloat);
    if (pass.hook != nullptr && (pass.hook_sites & site_bit(Site::kFinalNorm)) != 0) (*pass.hook)(Site::kFinalNorm, -1, x);
  }
  return x;
}

}  // namespace probekit::model
