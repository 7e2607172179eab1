// multi_probe_inference as a library: a model loaded up to the deepest layer its probes need, the tokenizer,
// and the probes of one or several layers (the binary probes of train_binary_probes, or the multiclass probe of
// train_probes); texts are scored in batches, one forward pass serving every layer, with the prompt suffix,
// site and position the probes were trained with.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chat/conversation.h"
#include "device/torch/gpu_utils.h"
#include "generation/generator.h"
#include "probes/probe_catalog.h"
#include "loading/model_loading.h"
#include "model/transformer.h"
#include "monitor/stream_monitors.h"
#include "probes/probe_files.h"
#include "readout/prompts.h"
#include "readout/readout.h"
#include "sae/latent_reading.h"
#include "sae/sae_flags.h"
#include "steering/steering.h"
#include "tokenizer/tokenizer.h"

namespace probekit::inference {

/// The model and its devices (loading::ModelRequest: --model empty means the model recorded with the probes) and
/// the probes to run.
struct EngineOptions : loading::ModelRequest {
  std::string probes_dir;
  std::string layers;      // --layers selection ("21-30", "all"); empty: the directory's layers
  int64_t layer = -1;      // --layer: one layer
  bool best_layer = false; // load each label's best layer only
  int64_t batch_size = 16;
  bool force = false;  // run probes recorded for another model (a warning instead of an error)
  bool generate = false;  // load every layer, the final norm and the LM head too (Engine::generate)
  bool texts_only = false;  // the caller gives texts only: probes trained on conversations are refused before the
                            // model loads (require_texts)
  steering::SteeringSpec steering;  // added to every pass (its probes: probes_dir unless it names its own)
  std::vector<sae::SaeSpec> saes;   // --sae: probes trained on an SAE site read through the one of its name
  std::vector<sae::SaeSpec> sae_labels;  // --sae-labels NAME=FILE: descriptions of an SAE's latents
};

/// Every probe's probability for one text: probability[l][k] for layers()[l] and labels()[k]; NaN where a
/// label has no probe at a layer.
struct TextScores {
  std::vector<std::vector<double>> probability;
  int64_t cut = 0;  // tokens cut from the text's start to fit the probes' prompt limit (as TokenScores::cut)
};

/// Per-token scores of one text: probability[t][l][k] is what the probes give for the prompt made of the
/// text's first t + 1 tokens followed by the prompt suffix. A text longer than the probes' prompt limit is cut
/// from the start as capture cut it: its first `cut` tokens after the special tokens in front are not scored.
struct TokenScores {
  int64_t cut = 0;
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;  // each token as the vocabulary spells it ("▁the", "Ġthe")
  std::vector<std::string> texts;   // each token decoded for people to read (" the")
  std::vector<std::vector<std::vector<double>>> probability;
  // Every-token (attention) probes only, else empty: the attention weight (the mean over heads) that the pool of
  // the whole prompt (the text and the suffix, what the ranking scores) puts on each text token, attention[t][l][k],
  // and on each suffix token, suffix_attention[s][l][k]; NaN on tokens the probes leave out (the BOS, those before
  // --max-tokens) and where a label has no probe. A probe's weights over the text and the suffix sum to 1.
  std::vector<std::vector<std::vector<double>>> attention, suffix_attention;
  // Every-token probes that score each token and aggregate (ema, rolling) only, else empty: each token's own score
  // token_probability[t][l][k] (the sigmoid of the linear score their aggregation weighs), beside `probability`,
  // the probe's score of the text up to the token.
  std::vector<std::vector<std::vector<double>>> token_probability;
  std::vector<uint8_t> mask;  // a conversation's: 1 for each token in the probes' token mask; empty for a text
  // With --sae: each SAE's largest latents (kShownLatents at most, zeros left out, largest first) at each token, as
  // the SAE reads its site there (the text up to the token, no suffix): latents[name][t].
  std::map<std::string, std::vector<sae::TopLatents>> latents;
};

/// Each --sae SAE's largest latents at one token, by the SAE's name.
using TokenLatents = std::map<std::string, sae::TopLatents>;

/// The latents shown per token and SAE beside the probe scores (TokenScores::latents).
constexpr int64_t kShownLatents = 8;

/// One new token of a generation with what the probes give for it.
struct ScoredToken {
  size_t row = 0;        // the prompt's index
  int64_t index = 0;     // among the row's new tokens, from 0
  int64_t position = 0;  // in the row's sequence (prompt included)
  int32_t id = 0;
  std::string token;     // as the vocabulary spells it ("▁the", "Ġthe")
  std::string text;      // what it adds to the row's text (a character split over several tokens comes with the last)
  bool last = false;     // the row's last token
  std::vector<std::vector<double>> probability;  // [layer][label], as TextScores: the text so far + the suffix
  std::vector<monitor::Firing> firings;  // the monitors that fired at this token (and, at the first, on the prompt)
  // [layer][label]: the token's own score for ema and rolling probes (TokenScores::token_probability); else empty
  std::vector<std::vector<double>> token_probability;
  TokenLatents latents;  // with --sae: each SAE's largest latents at this token (kShownLatents)
};
/// Called for each new token as it comes; returning false stops that row.
using ScoredTokenCallback = std::function<bool(const ScoredToken&)>;

/// One prompt's generation.
struct GeneratedText {
  std::vector<int32_t> prompt_ids, ids;
  std::string text;  // the new tokens' text
  generation::StopReason stop = generation::StopReason::kLength;
  std::vector<monitor::Firing> firings;  // every monitor firing, in order (a stop's too, whose token was not sent)
};

/// Prompts to generate after: texts as given, or conversations rendered with the chat template and its generation
/// prompt (Engine::chat_prompts).
struct ChatPrompts {
  std::vector<std::string> prompts;
  std::vector<std::vector<uint8_t>> masks;  // a chat prompt's chat_prompt_mask each; none when the probes read it whole
  bool rendered = false;  // by the chat template, which writes its own special tokens
};

/// The probes of one layer as loaded.
struct LayerProbes {
  int64_t layer = 0;
  probes::ProbeSet set;
  std::vector<int64_t> label_column;  // for each probe of `set`, its column in Engine::labels()
};

class Engine {
 public:
  static Engine load(const EngineOptions& options);
  /// An engine over a model loaded already (the Python package's), sharing its weights and tokenizer: the probes of
  /// `options.probes_dir` (none when empty: generation only) at the layers they select; `options`' model, devices and
  /// dtype are the model's own. Generation needs the model's LM head.
  static Engine attach(const EngineOptions& options, const loading::SharedModel& model);

  const std::vector<int64_t>& layers() const { return layers_; }
  const std::vector<std::string>& labels() const { return labels_; }
  /// The probes of each layer, as loaded.
  const std::vector<LayerProbes>& layer_probes() const { return probes_; }
  /// The threshold of label k's probe at layer index l: the one set at a target false-positive rate where the probe
  /// was calibrated (calibrate_probes), else the validation-tuned one (NaN without a probe).
  double calibrated_threshold(size_t l, size_t k) const { return thresholds_[l][k]; }
  /// Whether calibrated_threshold(l, k) was set at a target false-positive rate.
  bool threshold_calibrated(size_t l, size_t k) const { return calibrated_[l][k]; }
  /// Which thresholds calibrated_threshold gives: "calibration", "validation", or "calibration where set, else
  /// validation".
  std::string threshold_source() const;
  double validation_auc(size_t l, size_t k) const { return aucs_[l][k]; }
  /// True when the probes read every token of a text (attention, multimax, ema, rolling).
  bool reads_every_token() const;
  const probes::ProbeCatalog& catalog() const { return catalog_; }
  /// True when the probes are a multiclass probe (train_probes): labels() are its classes, and each text's
  /// probabilities at a layer are a softmax that sums to 1.
  bool multiclass() const { return !probes_.empty() && probes_.front().set.multiclass(); }
  /// How the probes' activations were read, which every pass repeats (the default recipe without probes).
  const activations::ReadoutRecipe& recipe() const { return recipe_; }
  const std::string& prompt_suffix() const { return recipe_.prompt_suffix; }
  /// The longest prompt the probes are run on: the capture's --max-length, else the model's positions.
  const readout::PromptLimit& prompt_limit() const { return prompts_->limit(); }
  const device::ComputeTarget& target() const { return target_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }

  /// Scores texts in batches, steered as the engine steers, or each text its own way (`steering`: one entry per
  /// text, null for none).
  std::vector<TextScores> score(const std::vector<std::string>& texts,
                                const std::vector<const steering::SteeringVectors*>& steering = {}) const;
  /// Scores conversations (each JSON: a list of messages, or {"messages", "tools"} as chat::conversation_text writes
  /// it) as capture read them: rendered with the model's chat template and read at the probes' token mask (assistant
  /// for probes trained on texts). Probes whose template was another are refused, naming the field. A conversation
  /// that cannot be read is named by `name` (its index: "conversation 1" for the first unless given).
  std::vector<TextScores> score_conversations(const std::vector<std::string>& conversations,
                                              const std::function<std::string(size_t)>& name = {}) const;
  /// Scores every token position of a conversation (JSON, as score_conversations takes it, named `name` in errors)
  /// rendered as score_conversations renders it: each token's score is the probes' for the conversation up to it,
  /// with no suffix, pooling only its tokens in the probes' mask (as capture read them); `mask` says which those are.
  TokenScores score_conversation_tokens(const std::string& conversation, const std::string& name = "conversation",
                                        const std::function<void()>& before_pass = {}) const;
  /// For probes trained on conversations, which tokens of a chat prompt (`conversation` rendered with the generation
  /// prompt as `rendered`, tokenized as `ids`) their mask reads: generation's text so far then pools those and the
  /// reply's, as capture pooled a conversation's. Empty for other probes, which read the whole text.
  /// The template runs within `limits` (a request's deadline).
  std::vector<uint8_t> chat_prompt_mask(const chat::Conversation& conversation, const std::string& rendered,
                                        const std::vector<int32_t>& ids, const chat::RenderLimits& limits = {}) const;
  /// Conversations rendered with the model's chat template as prompts to generate after (with add_special_tokens
  /// false: the template writes its own), each with its chat_prompt_mask.
  ChatPrompts chat_prompts(const std::vector<chat::Conversation>& conversations) const;
  /// The mask of a text so far: `prompt_mask` (empty: none), then the `generated` reply's tokens, in the mask unless
  /// the probes read the user's tokens or the token is a special one (a turn's end). Empty when `prompt_mask` is.
  std::vector<uint8_t> text_so_far_mask(const std::vector<uint8_t>& prompt_mask, const std::vector<int32_t>& generated) const;
  /// Scores every token position of a text: one pass over the text records its keys and values, then one
  /// batched pass runs the suffix after each prefix on top of them (not one forward per prefix). `before_pass` (as
  /// readout::Request's, for both) may end a long text's scoring early by throwing.
  TokenScores score_tokens(const std::string& text, const steering::SteeringVectors* steering = nullptr,
                           const std::function<void()>& before_pass = {}) const;
  /// Generates after each prompt (tokenized with special tokens unless `add_special_tokens` is false, as for a
  /// rendered chat template, which writes its own; --batch-size prompts at a time) while the probes score every new
  /// token as the last token of the text so far followed by the prompt suffix, read from the generation's own
  /// forward passes. Needs EngineOptions::generate.
  std::vector<GeneratedText> generate(const std::vector<std::string>& prompts, const generation::GenerationOptions& options,
                                      const ScoredTokenCallback& on_token, bool add_special_tokens = true) const;
  /// Monitor policies resolved against the probes: each label's column, its layer (given, or the one with the best
  /// validation AUC), its threshold (given, or calibrated_threshold's) and its action's steering. A policy the
  /// probes cannot run throws monitor::PolicyError naming the field ("monitors[0].layer").
  std::shared_ptr<const monitor::MonitorSet> resolve_monitors(const std::vector<monitor::MonitorPolicy>& policies) const;
  /// generate with monitors: every prompt a stream of a StreamBatch (each with its own steering once a monitor
  /// steers it), the tokens handed to `on_token` with their row and firings. Needs EngineOptions::generate.
  /// `prompt_masks`: each chat prompt's chat_prompt_mask (none: every prompt read whole).
  std::vector<GeneratedText> generate_monitored(const std::vector<std::string>& prompts,
                                                const generation::GenerationOptions& options,
                                                std::shared_ptr<const monitor::MonitorSet> monitors,
                                                const ScoredTokenCallback& on_token, bool add_special_tokens = true,
                                                const std::vector<std::vector<uint8_t>>& prompt_masks = {}) const;
  /// Generates after `prompts` as the tools do: with generate when no monitor watches and no chat mask is read, else
  /// with generate_monitored, whose streams read a chat's masked text so far. `monitors` may be null.
  std::vector<GeneratedText> generate_watched(const ChatPrompts& prompts, const generation::GenerationOptions& options,
                                              std::shared_ptr<const monitor::MonitorSet> monitors,
                                              const ScoredTokenCallback& on_token) const;
  /// The directory of the model in use.
  const std::string& model_dir() const { return options_.model_dir; }
  /// The model's fingerprint (model::Checkpoint::fingerprint): which checkpoint, whatever path named it.
  const std::string& model_fingerprint() const { return model_fingerprint_; }
  /// The steering every pass applies (EngineOptions::steering), as resolved; empty without any.
  const steering::SteeringVectors& steering() const { return steering_; }
  /// Replaces the steering every pass applies.
  void steer(const steering::SteeringSpec& spec);
  const model::TransformerModel& model() const { return *model_; }
  /// The SAEs of --sae, on the engine's device (latent steering and SAE sites name them).
  const std::vector<sae::SparseAutoencoder>& saes() const { return saes_; }

  /// Refuses texts (UsageError) for probes trained on conversations' masked tokens: they read a conversation's tokens
  /// in their mask, which a text has none of (ranking, per-token scores, and generation after a prompt that is no
  /// chat).
  void require_texts() const;

  Engine(Engine&&) noexcept;
  ~Engine();

 private:
  friend class StreamBatch;  // decodes with the engine's model, readout and probes
  Engine() = default;
  /// The prompt builder, the readout's request and the steering, once the model, tokenizer and probes are there.
  void prepare(const model::ModelConfig& config);
  /// Refuses scoring with an engine that has no probes.
  void require_probes() const;
  /// Refuses per-token scores of probes that pool (they read no single token's prefix).
  void require_per_token_position() const;
  /// The model's chat template (read once, when the engine is made), refused when the probes' conversations were
  /// rendered with another (by SHA-256), or when the model has none (the reason the reading gave).
  const chat::ChatTemplate& checked_chat_template() const;
  /// The prompts of `conversations` as the probes read conversations (their mask, no suffix).
  std::vector<readout::Prompt> conversation_prompts(const std::vector<std::string>& conversations,
                                                    const std::function<std::string(size_t)>& name) const;
  void load_probes(const model::ModelConfig& config);
  /// readout::rehearse_first_pass on the engine's GPU with its request, beside the model's load (`load`); nothing on
  /// the CPU, where there is no set-up to hide.
  std::future<void> rehearse_first_pass(model::LoadOptions load) const;
  /// Points the readout at the --sae the probes' SAE site names, checked against the one their rows were read with.
  void bind_sae(const probes::ProbeSet& set, const std::string& dir);
  void warn_of_other_steering() const;
  void index_labels();
  /// Probabilities of rows [N, layers, hidden] into tables[first + n][l][k], for every label with a probe at
  /// layer l (the tables are sized and NaN-filled by empty_tables).
  void store_probabilities(const at::Tensor& rows, std::vector<std::vector<std::vector<double>>>& tables,
                           size_t first) const;
  /// Every probe's probability for rows [N, layers, width]: [N, probes], layer after layer, on the device.
  at::Tensor probabilities_of(const at::Tensor& rows) const;
  /// Every-token probes: every probe's probability for texts whose token rows [R, layers, width] (all of them, as
  /// read with position all) start at `offsets` [texts + 1]: [texts, probes], layer after layer, on the device.
  /// `masked`: the rows are conversations' tokens in the probes' mask (ProbeSet::token_logits).
  at::Tensor text_probabilities(const at::Tensor& rows, const std::vector<int64_t>& offsets, bool masked) const;
  /// Where the batch of prompts starting at `start` ends: --batch-size texts, and for every-token probes at most
  /// 1 GiB of token rows (every layer's).
  size_t batch_end(const std::vector<readout::Prompt>& prompts, size_t start) const;
  /// Scores built prompts (a conversation's with its token mask) in batches, each row steered as `steering` says.
  std::vector<TextScores> score_prompts(const std::vector<readout::Prompt>& prompts,
                                        const std::vector<const steering::SteeringVectors*>& steering) const;
  /// Every-token probes: each text's probabilities [texts, probes] as the prompt text + suffix, read whole, steered
  /// by `writes` (the engine's own when null; `per_row`: one vector per text, [texts, hidden] each). With
  /// `last_token`, also each text's last token's own probabilities [texts, probes] (row_probabilities; undefined
  /// for probes without them; NaN where the token is not in the text's mask). With `masks` (a chat's, as
  /// text_so_far_mask gives them), each text pools its tokens in the probes' mask only, with no suffix.
  at::Tensor prompt_probabilities(const std::vector<readout::Sequence>& texts, const model::StreamWrites* writes,
                                  bool per_row, at::Tensor* last_token = nullptr,
                                  const std::vector<std::vector<uint8_t>>& masks = {}) const;
  /// Every-token probes that score each token (ema, rolling): each row's own probability [R, probes] of rows
  /// [R, layers, width], layer after layer; undefined for the other kinds.
  at::Tensor row_probabilities(const at::Tensor& rows) const;
  /// score_tokens for every-token probes: each prefix's whole prompt read and pooled, then the attention of the
  /// whole prompt's pool.
  void score_prefix_prompts(const readout::Sequence& ids, const readout::Request& request, TokenScores& result) const;
  /// Each token position of the built prompt `ids` scored as score_tokens scores it (into result.probability and,
  /// for every-token probes, result.attention), steered by `steering` (null: none); without the suffix after each
  /// prefix unless `with_suffix` (a conversation's, whose template writes the turns).
  void score_token_ids(const readout::Sequence& ids, const steering::SteeringVectors* steering, TokenScores& result,
                       bool with_suffix, const std::function<void()>& before_pass) const;
  /// Each --sae SAE's largest latents at each token of `ids` into result.latents, the pass steered by `writes`.
  void store_latents(const readout::Sequence& ids, const model::StreamWrites* writes, TokenScores& result) const;
  /// What shows each --sae SAE's largest latents at a token: one request per SAE (its site and layer, the latents'
  /// top kShownLatents packed), over shown_latents_.
  std::vector<readout::Request> latent_requests() const;
  /// saes_ set (on the engine's device, described by `labels`) and shown_latents_ made for them.
  void set_saes(std::vector<sae::SparseAutoencoder> saes, const std::vector<sae::SaeSpec>& labels);
  /// Warns when `prompt` and `new_tokens` more (the suffix after them) pass the probes' --max-length.
  void warn_past_limit(const readout::Sequence& prompt, int64_t new_tokens) const;
  /// Without a suffix after each prefix, a prefix of only the leading special tokens (the BOS) holds no token the
  /// probes read: those tokens' scores in result.probability become NaN, not the score of a row never trained on.
  void hide_leading_prefixes(TokenScores& result) const;
  /// A resolved monitor's threshold and where it came from: the request's; the probe's per-token calibration; its
  /// whole-text calibration where it has no per-token one; else its validation-tuned threshold.
  void set_threshold(monitor::ResolvedMonitor& m) const;
  /// Layer index l's cells of `tables` [t][l][k] set to NaN for the tokens outside [first, end): those the probes
  /// leave out (the leading specials, those past --max-tokens) have no score of their own.
  void hide_unread_tokens(size_t l, int64_t first, int64_t end, std::vector<std::vector<std::vector<double>>>& tables) const;
  /// The attention of the whole prompt `ids` + suffix into result.attention and result.suffix_attention, and each
  /// text token's own score into result.token_probability where the probes have one.
  void store_attention(const readout::Sequence& ids, const readout::Request& request, TokenScores& result) const;
  /// Stores probabilities_of's columns (on the host) into tables[first + n][l][k].
  void store_columns(const at::Tensor& columns, std::vector<std::vector<std::vector<double>>>& tables,
                     size_t first) const;
  std::vector<std::vector<std::vector<double>>> empty_tables(size_t count) const;
  /// One token's [layer][label] table of probabilities_of's (or row_probabilities') columns [probes].
  std::vector<std::vector<double>> column_table(const at::Tensor& columns) const;

  EngineOptions options_;
  probes::ProbeCatalog catalog_;
  device::ComputeTarget target_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::shared_ptr<const model::TransformerModel> model_;
  std::vector<int64_t> layers_;
  std::vector<std::string> labels_;
  std::vector<LayerProbes> probes_;
  std::vector<std::vector<double>> thresholds_, validation_thresholds_, aucs_;
  std::vector<std::vector<double>> per_token_thresholds_;  // a monitor's calibrated threshold; NaN where none
  std::vector<std::vector<bool>> calibrated_;  // thresholds_[l][k] set at a target false-positive rate
  int64_t calibrated_count_ = 0, validation_count_ = 0;  // probes in use with each kind of threshold
  activations::ReadoutRecipe recipe_;
  std::string model_fingerprint_;
  readout::Request request_;
  std::unique_ptr<readout::PromptBuilder> prompts_;
  std::shared_ptr<const chat::ChatTemplate> chat_template_;  // null: the model has none (chat_problem_ says why)
  std::string chat_problem_;
  steering::SteeringVectors steering_;
  std::unique_ptr<model::StreamWrites> writes_;  // request_.writes points here: an address that moves do not change
  std::vector<sae::SparseAutoencoder> saes_;      // --sae, on the engine's device
  std::vector<sae::LatentReading> shown_latents_;  // per SAE of saes_: its top kShownLatents latents, packed
  std::unique_ptr<sae::LatentReading> latents_;   // probes of an SAE site: request_.latents points here
};

}  // namespace probekit::inference
