// Model configuration in two steps: each family's resolve reads the config.json keys it knows through a
// ConfigReader (typed reads that keep an absent key, an explicit null and a value apart: the raw step), and turns
// them into one validated ModelConfig with the reference's defaults for the family, in both config layouts found
// in the wild (transformers 5's rope_parameters and layer_types, and the older rope_theta / rope_scaling /
// rope_local_base_freq / sliding_window_pattern / rotary_pct most published checkpoints carry).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "model/activation.h"

namespace probekit::model {

/// A config.json value that may be absent, explicitly null, or set.
template <typename T>
struct Field {
  bool present = false;
  std::optional<T> value;

  bool is_null() const { return present && !value; }
  T value_or(T fallback) const { return value ? *value : fallback; }
};

/// Typed reads of one config.json object's keys; a value of the wrong type throws std::runtime_error naming
/// the file and the key ("config.json: 'hidden_size' must be an integer").
class ConfigReader {
 public:
  /// `key_path` is put before the keys named in errors ("rope_scaling." for the keys inside rope_scaling).
  ConfigReader(const Json& object, std::string source, std::string key_path = "");

  /// Reads `key` as T: bool, int64_t (4096.0 accepted), double, std::string, std::vector<std::string>,
  /// std::vector<double>, std::vector<int64_t>, or ConfigReader for a nested object (whose errors name its keys
  /// as "key.inner").
  template <typename T>
  Field<T> read(const char* key) const;
  /// Whether the object has `key`, null or not.
  bool has(const char* key) const;
  /// The same object read as a file of its own named `source` (a multimodal config's text_config).
  ConfigReader with_source(std::string source) const;

  /// The file name errors start with.
  const std::string& source() const { return source_; }
  /// "config.json: 'rope_scaling.factor'": the file and the key with its path, for error messages.
  std::string where(const char* key) const;

 private:
  template <typename T>
  T convert(const Json& value, const char* key) const;

  const Json* object_;
  std::string source_, key_path_;
};

enum class NormKind { kRmsNorm, kLayerNorm };
enum class RopeType { kNone, kDefault, kLinear, kLlama3, kLongRope, kYarn, kProportional };
/// RMSNorm on queries and keys before the rotary embedding: per head (Qwen 3, Gemma 3), or over the whole
/// projection of all heads at once (OLMo 2).
enum class QkNorm { kNone, kPerHead, kWholeProjection };
/// A layer's feed-forward: one dense MLP, or experts a router picks from for each token.
enum class FeedForward { kDenseMlp, kRoutedExperts };
/// A layer's token mixer: softmax attention over the cached keys and values; multi-head latent attention (DeepSeek
/// V3: keys and values expanded per head from a latent that one shared rope key joins, which is what is cached); or
/// a Gated DeltaNet (linear attention whose past is a fixed-size state: Qwen3-Next's and Qwen3.5's linear_attention
/// layers).
enum class Mixer { kAttention, kLatentAttention, kGatedDeltaNet };

/// How rotary position embeddings are computed for one layer.
struct RopeSpec {
  RopeType type = RopeType::kNone;
  double theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  int64_t rotary_dim = 0;  // leading dims of each head that rotate (partial rotary: GPT-NeoX, Phi-4-mini)
  // longrope (Phi-3 128k, Phi-4-mini): each frequency is divided by its short factor in sequences of up to
  // original_max_position_embeddings tokens and by its long factor in longer ones; cos and sin are scaled by
  // attention_factor.
  std::vector<double> short_factors, long_factors;
  double attention_factor = 1.0;
  // YaRN (gpt-oss, DeepSeek V3, OLMo 3's long-context layers): frequencies of fewer than beta_slow rotations over
  // original_max_position_embeddings are divided by factor, those of more than beta_fast kept, a linear ramp
  // between (its ends rounded outwards with truncate); cos and sin are scaled by attention_factor.
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  // proportional (Gemma 4's full layers): the whole head rotates, but only the first rotated_fraction of its
  // frequencies (base ** (2i / head_dim)) turn; the others are 0, leaving their dimensions as they are.
  double rotated_fraction = 1.0;

  bool operator==(const RopeSpec& other) const;
};

/// The family's structure as flags: the one decoder block reads these, never the family name.
struct ArchFeatures {
  NormKind norm = NormKind::kRmsNorm;
  bool norm_adds_one = false;         // Gemma: x * (1 + w), computed in fp32
  Activation activation = Activation::kSilu;
  bool gated_mlp = true;              // down(act(gate(x)) * up(x)) vs down(act(fc(x)))
  bool input_norms = true;            // norms before attention and the MLP (OLMo 2 has none: only post-norms)
  QkNorm qk_norm = QkNorm::kNone;
  bool attention_output_norm = false; // norm on the attention branch before the residual add (Gemma 2/3)
  bool mlp_output_norm = false;       // norm on the MLP branch before the residual add (Gemma 2/3)
  bool parallel_residual = false;     // x + attn(ln1(x)) + mlp(ln2(x)) (GPT-NeoX)
  bool learned_positions = false;     // absolute position embeddings added to the input (GPT-2)
  bool scale_embeddings = false;      // embeddings * sqrt(hidden) (Gemma)
  std::optional<double> attn_softcap; // tanh soft-capping of attention scores (Gemma 2)
  bool value_norm = false;            // values RMS-normalized per head, without a weight (Gemma 4)
  bool attention_sinks = false;       // a learned logit per head joins each softmax's denominator (gpt-oss)
  bool attention_output_gate = false; // heads * sigmoid(gate(x)) before o_proj, the gate from q_proj (Qwen3-Next)
};

/// Per-layer settings.
struct LayerSpec {
  int64_t sliding_window = 0;  // 0: full causal attention
  RopeSpec rope;
  FeedForward feed_forward = FeedForward::kDenseMlp;
  int64_t head_dim = 0, num_kv_heads = 0;  // 0: the model's (Gemma 4's full layers have their own)
  Mixer mixer = Mixer::kAttention;
};

/// The shape of the Gated DeltaNet layers (linear_* keys): value head h reads key head h / (value_heads / key_heads).
struct LinearAttentionSpec {
  int64_t key_heads = 0, value_heads = 0, key_head_dim = 0, value_head_dim = 0;
  int64_t conv_kernel = 0;  // the causal depthwise convolution's width over q, k and v
  int64_t key_dim() const { return key_heads * key_head_dim; }
  int64_t value_dim() const { return value_heads * value_head_dim; }
  int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }
};

/// The shape of the multi-head latent attention layers (DeepSeek V3): per head a query of nope_head_dim +
/// rope_head_dim, a key of the same width whose rope part is one rope key all heads share, and a value of
/// value_head_dim; keys and values are expanded from a kv_lora_rank-wide latent of each token.
struct LatentAttentionSpec {
  int64_t q_lora_rank = 0;  // queries through a rank-q_lora_rank bottleneck (q_a_proj, q_b_proj); 0: one q_proj
  int64_t kv_lora_rank = 0, nope_head_dim = 0, rope_head_dim = 0, value_head_dim = 0;
  bool interleaved_rope = true;  // rope_interleave: the checkpoint's rope dims rotate in adjacent pairs
  int64_t qk_head_dim() const { return nope_head_dim + rope_head_dim; }
  /// What a token's cache entry holds per layer: its latent and its rope key.
  int64_t cached_width() const { return kv_lora_rank + rope_head_dim; }
};

/// How a router turns its logits into the top_k experts of a token and their weights.
enum class RouterScoring {
  kSoftmaxTopK,  // softmax over all experts, then the top k probabilities (Mixtral, Qwen MoE)
  kTopKSoftmax,  // the top k logits, then a softmax over those k (gpt-oss)
  // sigmoid scores; the experts chosen by the scores plus a correction bias within the topk_group groups (of
  // n_group) whose two best biased scores sum highest; weighted by their unbiased scores (DeepSeek V3)
  kSigmoidGroupedTopK,
};

/// The routed experts of the layers whose feed-forward is FeedForward::kRoutedExperts: the router picks the
/// top_k experts of each token, whose outputs are summed with the router's weights.
struct RoutedExpertsSpec {
  int64_t experts = 0, top_k = 0;
  int64_t intermediate_size = 0;  // of each expert
  bool normalize_top_k = false;   // the chosen probabilities rescaled to sum to 1 (Mixtral; Qwen's norm_topk_prob)
  // A dense expert every token takes (gated by a sigmoid in Qwen 2 MoE, ungated in DeepSeek V3); 0: none.
  int64_t shared_expert_intermediate_size = 0;
  RouterScoring scoring = RouterScoring::kSoftmaxTopK;
  int64_t groups = 1, top_groups = 1;   // kSigmoidGroupedTopK: n_group, and topk_group of them to choose from
  double routed_scaling_factor = 1.0;   // kSigmoidGroupedTopK: the chosen weights' final scale
  double swiglu_limit = 7.0;  // Activation::kClampedSwiglu's clamp
};

/// How the checkpoint's weights are stored (quantization_config); an empty method: as plain floats.
struct Quantization {
  std::string method;          // quant_method: "", "fp8" or "mxfp4"
  std::vector<int64_t> block;  // fp8: weight_block_size [out, in], the block each weight_scale_inv entry scales
};

/// The validated configuration every other part of the runtime uses.
struct ModelConfig {
  std::string model_type;         // as in config.json ("gemma3" for the multimodal wrapper)
  std::string text_model_type;    // the language model's family
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, max_positions = 0;
  double norm_eps = 1e-6;
  double attention_scale = 1.0;
  bool qkv_bias = false, output_bias = false, mlp_bias = false;
  ArchFeatures features;
  RoutedExpertsSpec routed_experts;
  LinearAttentionSpec linear_attention;  // of the layers whose mixer is Mixer::kGatedDeltaNet
  LatentAttentionSpec latent_attention;  // of the layers whose mixer is Mixer::kLatentAttention
  std::vector<LayerSpec> layers;
  // The LM head (read only for generation): the token embedding table itself when tied, else its own weight.
  bool tie_word_embeddings = false;
  std::optional<double> final_logit_softcap;  // tanh soft-capping of the logits (Gemma 2)
  // Gemma 4: a [per_layer_input_size] input of each layer from its own embedding table (of per_layer_input_vocab
  // rows) and a projection of the embeddings, gated into the stream after the layer's MLP; 0: none.
  int64_t per_layer_input_size = 0, per_layer_input_vocab = 0;
  Quantization quantization;
};

/// The head dimension and key/value heads of a layer (its own, or the model's).
int64_t layer_head_dim(const ModelConfig& config, int64_t layer);
int64_t layer_kv_heads(const ModelConfig& config, int64_t layer);

/// The layers whose feed-forward is routed experts (the layers with a router), ascending.
std::vector<int64_t> routed_expert_layers(const ModelConfig& config);

/// Whether some layer is a Gated DeltaNet (a recurrent state in place of cached keys and values).
bool has_recurrent_layers(const ModelConfig& config);

/// The longest sequence that a rope choosing its factors by the sequence's length (longrope) still computes
/// with its short factors; 0 when no layer's rope depends on the length.
int64_t longest_short_rope_sequence(const ModelConfig& config);

/// Resolves config.json's JSON (read from `source`) with the family its model_type names: the family's
/// defaults applied, then validated; throws std::runtime_error naming the file and the key.
ModelConfig resolve_config(const Json& json, const std::string& source);

/// Reads DIR/config.json and resolves it.
ModelConfig load_config(const std::string& checkpoint_dir);

/// The model_type values the runtime supports.
std::vector<std::string> supported_model_types();

}  // namespace probekit::model
