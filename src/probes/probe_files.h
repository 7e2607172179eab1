// Probe files: one safetensors file per probe whose tensors carry the reference's state-dict names and shapes
// (linear.weight [O, H], ...; encoder.0.*, attention.in_proj_*, classifier.* for multihead), so that
// `module.load_state_dict(safetensors.torch.load_file(path), strict=True)` works on the reference's classes,
// with the reference's model_class / model_config / metadata as string metadata. A probes.json index lists
// a directory's binary probes with their thresholds (train_binary_probes), or names its multiclass probe and
// classes (train_probes), with how the activations were made; ProbeSet loads either for inference. Writing is in
// probe_files.cpp, reading and scoring (ProbeSet) in probe_set.cpp.
#pragma once

#include <ATen/ATen.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "activations/activation_store.h"
#include "io/safetensors.h"
#include "probes/probe_bank.h"
#include "probes/token_rows.h"

namespace probekit::probes {

struct BinaryTrainingResult;

/// The index of a probes directory, and the formats it records.
inline constexpr const char* kProbeIndexFile = "probes.json";
inline constexpr const char* kBinaryIndexFormat = "probekit.binary_probes";
inline constexpr const char* kMulticlassIndexFormat = "probekit.multiclass_probe";

/// The dtype's name as torch prints it without the prefix: float32, bfloat16, float16, float64.
std::string dtype_label(at::ScalarType type);

/// The reference's class name: BinaryLinearProbe, BinaryMultiHeadProbe (outputs 1, binary) or LinearProbe,
/// MultiHeadProbe (multiclass).
std::string model_class_name(const ProbeShape& shape, bool binary);

/// The reference's model_config entries as metadata strings: input_dim, plus hidden_dim (multihead) and
/// num_classes (multiclass).
std::map<std::string, std::string> model_config_metadata(const ProbeShape& shape, bool binary);

/// Writes probe `probe` of `bank` to `path` (tensors in the bank's dtype) with string metadata.
void save_probe(const std::string& path, const ProbeBank& bank, int64_t probe,
                const std::map<std::string, std::string>& metadata);

/// Checks that a probe file holds every tensor of a probe of `shape` with its shape and a float dtype, and no
/// other (as load_state_dict(strict=True)).
void check_probe_file(const safetensors::File& file, const ProbeShape& shape);

/// Copies a probe file checked against the bank's shape into probe `probe` of `bank`.
void load_probe(const safetensors::File& file, ProbeBank& bank, int64_t probe);

/// Writes logits_check.safetensors: `inputs` [n, H] and the saved probes' eval-mode `logits` [n, outputs], so
/// that a reader can check it loads the probes right; `labels` names the logits' columns. For every-token probes
/// `inputs` holds the token rows of n texts and the metadata `offsets` their row offsets ([n + 1], JSON).
void write_logits_check(const std::string& path, const at::Tensor& inputs, const at::Tensor& logits,
                        const std::vector<std::string>& labels, const std::vector<int64_t>& offsets = {});

/// The file name of a label's probe, probe_{label}.safetensors; throws for labels unusable in a file name.
std::string binary_probe_file_name(const std::string& label);

/// Writes probe_{label}.safetensors for every trained label, logits_check.safetensors (the first test rows
/// and their logits, for readers to check they load the probes right) and probes.json, which it returns.
Json save_binary_probes(const std::string& directory, const BinaryTrainingResult& result,
                        const activations::FileAttributes& attributes, const std::string& activations_path);

/// probes.json's key of the readout recipe (activations/readout_recipe.h) the probes' activations were read with.
constexpr const char* kReadoutKey = "readout";

/// The file train_probes writes its best-epoch probe to, the one inference runs.
constexpr const char* kMulticlassProbeFile = "best_probe.safetensors";

/// Writes probes.json for a train_probes directory: its probe file (kMulticlassProbeFile, of `shape` in
/// `dtype`), the class names, the best epoch and how the activations were made; returns it.
Json save_multiclass_index(const std::string& directory, const ProbeShape& shape, at::ScalarType dtype,
                           const std::vector<std::string>& class_names, int64_t best_epoch,
                           const activations::FileAttributes& attributes, const std::string& activations_path);

/// How the activations of the probes indexed by `index` (a probes.json) were read: its "readout", or the same
/// fields at the top level of an index written before the recipe. Errors name `where` and the field.
activations::ReadoutRecipe recorded_recipe(const Json& index, const std::string& where);

/// One output of a ProbeSet: a binary probe as listed in probes.json, or one class of a multiclass probe
/// (whose thresholds and AUROC are NaN: it has none of its own).
struct ProbeInfo {
  std::string label;
  int64_t label_index = 0;
  std::string file;
  double threshold = 0.5;        // on the probability, tuned on the validation split
  double threshold_logit = 0.0;  // the same threshold on the logit (exact: compare logits with it)
  double val_auc = 0.0;
  int64_t best_epoch = 0;
  // The threshold on the probability set at a target false-positive rate on ordinary data (calibration.h); NaN
  // for a probe not calibrated.
  double calibrated_threshold = std::numeric_limits<double>::quiet_NaN();
  // The threshold on every token's score that flags at most that share of ordinary texts (a monitor's); NaN where
  // the calibration data held one row per text.
  double per_token_threshold = std::numeric_limits<double>::quiet_NaN();
};

/// A probes directory loaded for inference, evaluated in eval mode (no dropout): the binary probes of
/// train_binary_probes in one bank, one independent probability per label (sigmoid), or the multiclass probe of
/// train_probes, one probability per class that sum to 1 (softmax).
class ProbeSet {
 public:
  /// Loads `directory`/probes.json and its probe files onto `device` in `dtype`.
  static ProbeSet load(const std::string& directory, at::Device device, at::ScalarType dtype);

  /// The outputs, one per label or class.
  const std::vector<ProbeInfo>& probes() const { return probes_; }
  /// Their labels, in the order of probes().
  std::vector<std::string> labels() const;
  const ProbeShape& shape() const { return bank_.shape(); }
  /// Every probe's parameters, in the order of probes().
  const ProbeBank& bank() const { return bank_; }
  /// The index's fields (format, layer, the probes, ...).
  const Json& index() const { return index_; }
  /// How the probes' activations were read (model, site, position, prompt suffix, cut, steering).
  const activations::ReadoutRecipe& recipe() const { return recipe_; }
  int64_t layer() const;
  /// True for a multiclass probe: its outputs are exclusive classes.
  bool multiclass() const { return multiclass_; }

  /// Logits [N, K] of activations [N, H], in the order of probes(). Not for every-token probes (token_logits).
  at::Tensor logits(const at::Tensor& activations) const;
  /// Every-token probes: logits [B, K] of B texts whose token rows (every token, as captured with --position
  /// all) are `rows` [R, H] at row offsets `offsets` [B + 1]; the recorded skip_leading and max_tokens apply, but
  /// for `masked` rows (a conversation's tokens in its mask, none of them a BOS: probes trained on texts left out
  /// the first of those), which skip none. With `weights`, also each read row's attention weights [R', K, heads]
  /// (R' the rows read, text after text).
  at::Tensor token_logits(const at::Tensor& rows, const std::vector<int64_t>& offsets, at::Tensor* weights = nullptr,
                          bool masked = false) const;
  /// The rows of each text token_logits reads.
  TokenLayout token_layout(const std::vector<int64_t>& offsets, bool masked = false) const;
  /// Every-token probes: the logits [P, K] of every prefix of each text (prefix_layout's: the text cut after each row
  /// it reads, text after text), what they score token by token as a text grows; `counts` gets each text's P.
  at::Tensor prefix_logits(const at::Tensor& rows, const std::vector<int64_t>& offsets, std::vector<int64_t>& counts,
                           bool masked = false) const;
  /// Every-token probes that score each token and aggregate (ema, rolling): each row's own logit [R, K] of
  /// `rows` [R, H], the score the aggregation weighs. Undefined for the other kinds (attention, multimax: their
  /// tokens have no score of their own).
  at::Tensor row_logits(const at::Tensor& rows) const;
  /// Probabilities [N, K] (float32): sigmoid of each binary probe's logit, or the softmax over the classes.
  at::Tensor probabilities(const at::Tensor& activations) const;
  /// The unit direction [H] (fp32) along which output `index` of probes() grows (the kind's direction; a kind
  /// without one throws saying why).
  at::Tensor direction(size_t index) const;

 private:
  ProbeSet(ProbeBank bank, std::vector<ProbeInfo> probes, Json index, activations::ReadoutRecipe recipe, bool multiclass);

  ProbeBank bank_;
  std::vector<ProbeInfo> probes_;
  Json index_;
  activations::ReadoutRecipe recipe_;
  bool multiclass_ = false;
};

}  // namespace probekit::probes
