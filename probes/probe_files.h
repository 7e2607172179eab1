// Probe files: one safetensors file per probe whose tensors carry the reference's state-dict names and shapes
// (linear.weight [O, H], ...; encoder.0.*, attention.in_proj_*, classifier.* for multihead), so that
// `module.load_state_dict(safetensors.torch.load_file(path), strict=True)` works on the reference's classes,
// with the reference's model_class / model_config / metadata as string metadata. A probes.json index lists
// a directory's binary probes with their thresholds; BinaryProbeSet loads such a directory for inference.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "activations/activation_store.h"
#include "io/safetensors.h"
#include "probes/probe_bank.h"

namespace probekit::probes {

struct BinaryTrainingResult;

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
/// that a reader can check it loads the probes right; `labels` names the logits' columns.
void write_logits_check(const std::string& path, const at::Tensor& inputs, const at::Tensor& logits,
                        const std::vector<std::string>& labels);

/// The file name of a label's probe, probe_{label}.safetensors; throws for labels unusable in a file name.
std::string binary_probe_file_name(const std::string& label);

/// Writes probe_{label}.safetensors for every trained label, logits_check.safetensors (the first test rows
/// and their logits, for readers to check they load the probes right) and probes.json, which it returns.
Json save_binary_probes(const std::string& directory, const BinaryTrainingResult& result,
                        const activations::FileAttributes& attributes, const std::string& activations_path);

/// One probe of a BinaryProbeSet, as listed in probes.json.
struct BinaryProbeInfo {
  std::string label;
  int64_t label_index = 0;
  std::string file;
  double threshold = 0.5;        // on the probability, tuned on the validation split
  double threshold_logit = 0.0;  // the same threshold on the logit (exact: compare logits with it)
  double val_auc = 0.0;
  int64_t best_epoch = 0;
};

/// A directory of binary probes loaded for inference: every probe of probes.json in one bank, evaluated at
/// once in eval mode (no dropout).
class BinaryProbeSet {
 public:
  /// Loads `directory`/probes.json and its probe files onto `device` in `dtype`.
  static BinaryProbeSet load(const std::string& directory, at::Device device, at::ScalarType dtype);

  const std::vector<BinaryProbeInfo>& probes() const { return probes_; }
  const ProbeShape& shape() const { return bank_.shape(); }
  /// The index's fields (layer, model_name, site, position, prompt_suffix, ...).
  const Json& index() const { return index_; }
  int64_t layer() const;

  /// Logits [N, K] of activations [N, H], in the order of probes().
  at::Tensor logits(const at::Tensor& activations) const;

 private:
  BinaryProbeSet(ProbeBank bank, std::vector<BinaryProbeInfo> probes, Json index);

  ProbeBank bank_;
  std::vector<BinaryProbeInfo> probes_;
  Json index_;
};

}  // namespace probekit::probes
