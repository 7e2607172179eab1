// The family adapters: for each supported model_type, how config.json maps onto ModelConfig (the keys the family
// reads, the defaults of the reference's config class, feature flags) and how the checkpoint's weights map onto
// ModelWeights (names, fusions, transposes). The decoder itself never asks which family it runs.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace probekit::model {

/// Which parts of the checkpoint a run needs: layers above the deepest requested one, the final norm when
/// not requested, and the LM head unless generating are never read.
struct LoadPlan {
  int64_t layers = 0;  // load decoder layers [0, layers)
  bool final_norm = false;
  bool embeddings_on_host = false;  // see LoadOptions
  bool lm_head = false;             // see LoadOptions
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  std::vector<at::Device> layer_devices;  // see LoadOptions
  std::optional<bool> keep_mxfp4_packed;  // see LoadOptions
};

/// Family::tensor_layer's answer for tensors outside the decoder layers that a load reads (embeddings, final
/// norm), for tensors no load ever reads (a vision tower), and for an untied LM head (read for generation only).
constexpr int64_t kGlobalTensor = -1;
constexpr int64_t kUnusedTensor = -2;
constexpr int64_t kLmHeadTensor = -3;

struct Family {
  const char* model_type;
  /// Reads the family's config.json keys into `config`, whose model_type is already set.
  void (*resolve)(const ConfigReader& config_json, ModelConfig& config);
  void (*load)(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights);
  /// The decoder layer a checkpoint tensor belongs to, or kGlobalTensor / kUnusedTensor.
  int64_t (*tensor_layer)(const std::string& name);
};

/// Every supported family, in the order listed to users.
const std::vector<Family>& families();
/// The family of a model_type, or nullptr.
const Family* find_family(const std::string& model_type);
/// Checks the resolved config's invariants; throws naming `source`.
void validate_config(const ModelConfig& config, const std::string& source);
/// Refuses a layer count, hidden size or head count that is not positive or is implausibly large; families call
/// it as soon as they have read them, before sizing per-layer settings or deriving other dimensions.
void check_core_dimensions(const ModelConfig& config, const std::string& source);

// Helpers the adapters share.

/// For Family::tensor_layer: N for a name that starts with one of `layer_prefixes` followed by "N."
/// ("model.layers." + "3.self_attn..."), kLmHeadTensor for one that starts with one of `head_prefixes`,
/// else kGlobalTensor.
int64_t layer_by_prefix(const std::string& name, std::initializer_list<std::string_view> layer_prefixes,
                        std::initializer_list<std::string_view> head_prefixes);
/// The LM head for a plan that asks for it: the token embedding table when the config ties them, else the
/// first of `names` (from the checkpoint's root) the checkpoint holds; an error naming them when none is.
void load_lm_head(const Checkpoint& checkpoint, std::initializer_list<const char*> names, const ModelConfig& config,
                  const LoadPlan& plan, ModelWeights& weights);
/// tie_word_embeddings, `family_default` when absent (each family's config class has its own).
bool read_tie_word_embeddings(const ConfigReader& config_json, bool family_default);

/// Reads a Hugging Face activation name (hidden_act and friends) under `key`, `default_name` when absent.
Activation read_activation(const ConfigReader& config_json, const char* key, const char* default_name);

/// One rope_scaling / rope_parameters object as written.
struct RawRope {
  Field<std::string> rope_type;  // "rope_type", or the older "type"
  Field<double> rope_theta;
  Field<double> factor;
  Field<double> low_freq_factor;
  Field<double> high_freq_factor;
  Field<int64_t> original_max_position_embeddings;
  Field<double> partial_rotary_factor;
  Field<std::vector<double>> short_factor, long_factor;  // longrope
  Field<double> attention_factor;                        // longrope, yarn
  Field<double> beta_fast, beta_slow, mscale, mscale_all_dim;  // yarn
  Field<bool> truncate;                                  // yarn
};
/// Reads the rope object under `key`.
Field<RawRope> read_rope(const ConfigReader& config_json, const char* key);
/// Whether rope_parameters holds one rope per layer type (Gemma 3: full_attention, sliding_attention).
bool rope_parameters_per_layer_type(const ConfigReader& config_json);
/// rope_parameters when it holds one rope for every layer (transformers 5), else absent.
Field<RawRope> read_single_rope_parameters(const ConfigReader& config_json);
/// The rope a rope object (or none) read under `key` of `config_json` describes; `theta` where it sets none.
RopeSpec make_rope(const Field<RawRope>& rope, double theta, int64_t rotary_dim, const ConfigReader& config_json,
                   const char* key);
/// The rope of a single-rope family: rope_parameters (transformers 5) or rope_theta + rope_scaling.
RopeSpec resolve_single_rope(const ConfigReader& config_json, double default_theta, int64_t rotary_dim);
/// The ropes of a family whose full-attention and sliding-window layers have their own (Gemma 3, OLMo 3).
struct LayerTypeRopes {
  RopeSpec full, sliding;
};
/// rope_parameters per layer type (transformers 5: full_attention, sliding_attention), each `*_theta` where it
/// sets none; else the older layout: rope_theta + rope_scaling for the full layers, `sliding_theta` unscaled for
/// the sliding ones.
LayerTypeRopes resolve_layer_type_ropes(const ConfigReader& config_json, int64_t rotary_dim, double full_theta,
                                        double sliding_theta);
/// The fraction of each head's dimensions that rotate: rope_parameters' partial_rotary_factor (transformers 5),
/// else the first of `keys` the config sets (partial_rotary_factor, GPT-NeoX's rotary_pct), else `fallback`;
/// it must lie in (0, 1].
double read_rotary_fraction(const ConfigReader& config_json, std::initializer_list<const char*> keys, double fallback);
/// For each layer, whether it uses sliding-window attention according to layer_types; empty if absent.
std::vector<bool> sliding_from_layer_types(const ConfigReader& config_json, int64_t num_layers);

/// The defaults of a family's config class for keys a config.json may omit.
struct DimensionDefaults {
  int64_t vocab_size, hidden_size, intermediate_size, num_layers, num_heads;
  int64_t num_kv_heads;  // 0: as many as query heads
  int64_t head_dim;      // 0: hidden_size / num_heads
  int64_t max_positions;
  double norm_eps;
  const char* activation = "silu";           // the activation key's default
  bool tie_word_embeddings = false;          // tie_word_embeddings' default
  const char* activation_key = "hidden_act";
};
/// Reads what the Llama-style families share: the dimensions (hidden, intermediate, layers, heads, head_dim,
/// positions, rms_norm_eps), the activation and whether the LM head is tied to the embeddings.
void resolve_llama_common(const ConfigReader& config_json, ModelConfig& config, const DimensionDefaults& defaults);
/// Qwen's sliding windows: layer_types, or with use_sliding_window the layers from max_window_layers on.
void resolve_qwen_windows(const ConfigReader& config_json, ModelConfig& config);
/// Sets each layer's window: `sliding[i]` selects `window` for layer i (no entry: full attention).
void apply_sliding_windows(ModelConfig& config, const std::vector<bool>& sliding, int64_t window);
/// Loads decoder layers [0, plan.layers) in order: `load_layer` fills layer i's weights from its scope
/// (`layers.sub(i)`, e.g. "model.layers.3.").
void load_layers(const WeightScope& layers, const LoadPlan& plan, ModelWeights& weights,
                 const std::function<void(const WeightScope& layer, int64_t i, LayerWeights& weights)>& load_layer);
/// Loads the routed experts of one decoder layer from its scope ("model.layers.3.").
using ExpertLoader = std::function<RoutedExperts(const WeightScope& layer)>;
/// Loads the Llama-style layout under `model` ("model." or a multimodal prefix); the layers whose feed-forward
/// is routed experts take theirs from `load_experts`, the others a dense mlp.{gate,up,down}_proj.
void load_llama_layout(const WeightScope& model, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights,
                       const ExpertLoader& load_experts = {});
/// One Llama-style decoder layer `i` under its scope `layer`: norms, attention (with the layer's own head_dim),
/// and a dense MLP or, for routed-expert layers, what `load_experts` reads.
void load_llama_layer(const WeightScope& layer, const ModelConfig& config, int64_t i, LayerWeights& weights,
                      const ExpertLoader& load_experts = {});
/// A gated MLP's {gate,up,down}_proj weights (and biases when `bias`) under `mlp`.
DenseMlp load_gated_mlp(const WeightScope& mlp, int64_t hidden, int64_t inner, bool bias);
/// The names of one MoE layout's weights under a layer's feed-forward scope.
struct ExpertNames {
  const char* router;                // "gate"
  const char* gate, *up, *down;      // of expert e, under "experts.{e}.": "w1", "w3", "w2" (Mixtral)
};
/// The router and every expert's projections under `block` ("model.layers.3.mlp."), stacked.
RoutedExperts load_routed_experts(const WeightScope& block, const ModelConfig& config, const ExpertNames& names);

/// Qwen 2 MoE's experts of one decoder layer (its scope): mlp.gate, mlp.experts.{e}.{gate,up,down}_proj and the
/// shared expert with its sigmoid gate (mlp.shared_expert.*, mlp.shared_expert_gate).
RoutedExperts load_qwen2_moe_experts(const WeightScope& layer, const ModelConfig& config);

/// Qwen MoE's routed and shared experts from config.json (num_experts, num_experts_per_tok, moe_intermediate_size,
/// norm_topk_prob, shared_expert_intermediate_size), each defaulting to the family's config class.
struct QwenExpertDefaults {
  int64_t experts, top_k, intermediate_size;
  bool normalize_top_k;
  int64_t shared_intermediate_size;
};
void read_qwen_shared_experts(const ConfigReader& config_json, ModelConfig& config, const QwenExpertDefaults& defaults);

/// What Qwen3-Next and Qwen3.5 share (families/qwen3_next.cpp): the Llama-style dimensions with `defaults`, (1 + w)
/// norms, per-head q/k norms, the attention output gate, partial rotary (0.25 by default), each layer's mixer
/// (layer_types or full_attention_interval) and the Gated DeltaNet's linear_* keys.
void resolve_gated_delta_net_hybrid(const ConfigReader& config_json, ModelConfig& config, const DimensionDefaults& defaults);
/// A Gated DeltaNet layer's in_proj in our order (DeltaNetWeights::in_proj) from its linear_attn scope.
using DeltaNetProjectionLoader =
    std::function<Linear(const WeightScope& linear_attn, const LinearAttentionSpec& spec, int64_t hidden)>;
/// The hybrid layout under `model`: per layer input_layernorm, post_attention_layernorm, linear_attn (in_proj from
/// `load_in_proj`, conv1d, A_log, dt_bias, norm, out_proj) or self_attn (q_proj with the gate), and the routed
/// experts from `load_experts` or a dense mlp.
void load_gated_delta_net_layout(const WeightScope& model, const ModelConfig& config, const LoadPlan& plan,
                                 ModelWeights& weights, const DeltaNetProjectionLoader& load_in_proj,
                                 const ExpertLoader& load_experts = {});

/// The number of routed experts: num_experts (published Qwen MoE configs) or num_local_experts (Mixtral, and
/// what transformers 5 writes for Qwen 3 MoE), `fallback` when neither is set; different values are an error.
int64_t read_expert_count(const ConfigReader& config_json, int64_t fallback);
/// Qwen MoE's choice of sparse layers: routed experts on layer i when (i + 1) is a multiple of
/// decoder_sparse_step and i is not in mlp_only_layers; a dense MLP elsewhere.
void assign_sparse_layers(const ConfigReader& config_json, ModelConfig& config);
/// The token embedding table: copied to the plan's device and dtype, or left in the memory map
/// (LoadPlan::embeddings_on_host).
at::Tensor load_token_embeddings(const WeightScope& scope, const std::string& name, const ModelConfig& config,
                                 const LoadPlan& plan);
/// Loads a norm's weight (and bias for LayerNorm) in fp32; Gemma's (1 + w) is folded in.
Norm load_norm(const WeightScope& scope, const std::string& name, int64_t size, const ModelConfig& config);

// The adapters (one file each under model/families/).
void resolve_llama(const ConfigReader& config_json, ModelConfig& config);
void resolve_mistral(const ConfigReader& config_json, ModelConfig& config);
void resolve_qwen2(const ConfigReader& config_json, ModelConfig& config);
void resolve_qwen3(const ConfigReader& config_json, ModelConfig& config);
void resolve_gemma(const ConfigReader& config_json, ModelConfig& config);
void resolve_gemma2(const ConfigReader& config_json, ModelConfig& config);
void resolve_gemma3_text(const ConfigReader& config_json, ModelConfig& config);
void resolve_gemma3(const ConfigReader& config_json, ModelConfig& config);
void resolve_gpt2(const ConfigReader& config_json, ModelConfig& config);
void resolve_gpt_neox(const ConfigReader& config_json, ModelConfig& config);
void resolve_mixtral(const ConfigReader& config_json, ModelConfig& config);
void resolve_qwen2_moe(const ConfigReader& config_json, ModelConfig& config);
void resolve_qwen3_moe(const ConfigReader& config_json, ModelConfig& config);
void resolve_phi3(const ConfigReader& config_json, ModelConfig& config);
void resolve_olmo2(const ConfigReader& config_json, ModelConfig& config);
void resolve_olmo3(const ConfigReader& config_json, ModelConfig& config);
void resolve_smollm3(const ConfigReader& config_json, ModelConfig& config);
void resolve_gemma4_text(const ConfigReader& config_json, ModelConfig& config);
void resolve_qwen3_next(const ConfigReader& config_json, ModelConfig& config);
void resolve_qwen3_5_text(const ConfigReader& config_json, ModelConfig& config);
void resolve_qwen3_5(const ConfigReader& config_json, ModelConfig& config);
void load_qwen3_next(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights);
void load_qwen3_5_text(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                       ModelWeights& weights);
void load_qwen3_5_multimodal(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                             ModelWeights& weights);
int64_t qwen3_next_tensor_layer(const std::string& name);
void resolve_gemma4(const ConfigReader& config_json, ModelConfig& config);
void resolve_gpt_oss(const ConfigReader& config_json, ModelConfig& config);
void load_gpt_oss(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights);
void resolve_deepseek_v3(const ConfigReader& config_json, ModelConfig& config);
void load_deepseek_v3(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                      ModelWeights& weights);
void load_gemma4_text(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                      ModelWeights& weights);
void load_gemma4_multimodal(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                            ModelWeights& weights);
int64_t llama_style_tensor_layer(const std::string& name);
int64_t gemma3_multimodal_tensor_layer(const std::string& name);
int64_t gpt2_tensor_layer(const std::string& name);
int64_t gpt_neox_tensor_layer(const std::string& name);
void load_llama_style(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights);
void load_gemma3_multimodal(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan,
                            ModelWeights& weights);
void load_gpt2(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights);
void load_gpt_neox(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights);
void load_mixtral(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights);
void load_qwen2_moe(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights);
void load_qwen3_moe(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights);
void load_phi3(const Checkpoint& checkpoint, const ModelConfig& config, const LoadPlan& plan, ModelWeights& weights);

}  // namespace probekit::model
