// One-vs-rest probe training (the reference's train_binary_probes.py), all labels at once: the K probes of
// one activation file train as one batched problem (probe_bank.h), each with its own AdamW state, best epoch
// by validation AUROC (ties to the lower validation loss) and early-stopping counter; a stopped probe is
// frozen while the others go on. A kind that fits directly (logistic, mean-diff) is instead fitted on the whole
// train split by its own solver, each probe to its own convergence (binary_paths.h).
//
// Every random draw is independent of K (random_streams.h): a probe's initialisation comes from the seed and
// its label's index in label_names, the batch order from the seed and the epoch, and the dropout masks from
// the seed, the epoch and the position, shared by all probes. A probe trained in a batch of 45 therefore
// follows the same path as the same probe trained alone, up to the rounding of the matrix products.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "activations/activation_store.h"
#include "metrics/intervals.h"
#include "metrics/metrics.h"
#include "probes/probe_bank.h"
#include "probes/training_options.h"

namespace probekit::probes {

/// --early-stopping-patience's value for "never stop early" (0 stops after the first epoch, as the reference).
constexpr int64_t kNeverStopEarly = -1;

/// The reference's (train_binary_probes_parallel.py) defaults, plus early stopping, the learning-rate schedule,
/// class weights and the labels to train.
struct BinaryTrainingOptions : TrainingOptions {
  BinaryTrainingOptions() : TrainingOptions(/*batch_size=*/18, /*epochs=*/50, /*lr=*/5e-4, /*weight_decay=*/1e-3) {}
  // A probe stops once this many epochs in a row brought no better validation AUROC, checked after every epoch
  // as the reference does (so 0 stops it after its first epoch); kNeverStopEarly: never.
  int64_t patience = 10;
  bool cosine_schedule = true;
  double eta_min = 1e-5;
  bool balance_classes = false;    // --pos-weight auto: BCE pos_weight = negatives / positives of train
  std::vector<std::string> labels;  // a subset of label_names to train; empty: all
};

/// Throws UsageError naming the flag of the first value that cannot train: check_training_options' checks,
/// and a patience below kNeverStopEarly.
void check_binary_training_options(const BinaryTrainingOptions& options);

/// The reference's per-probe history (metrics_{label}.json "history"); lists hold the epochs the probe ran.
struct LabelHistory {
  std::vector<double> train_loss, val_loss, val_auc, val_accuracy, learning_rates;
  int64_t best_epoch = 0;  // 1-based
  double best_val_auc = 0.0;
  bool stopped_early = false;
};

/// Examples and positives of a label in one split.
struct ClassBalance {
  int64_t examples = 0;
  int64_t positives = 0;
};

/// One trained probe: its history and its metrics with the best-epoch weights.
struct TrainedLabel {
  std::string label;
  int64_t label_index = 0;  // in label_names
  ClassBalance train, val, test;
  double pos_weight = 1.0;
  LabelHistory history;
  // Scores are logits, so "probability >= 0.5" is "logit >= 0" without rounding.
  metrics::ThresholdMetrics test_at_half;
  metrics::ThresholdMetrics val_tuned;   // the threshold (a logit) maximising validation F1
  metrics::ThresholdMetrics test_tuned;  // test metrics at that threshold
  double test_auc_roc = 0.0;             // NaN when the test split holds one class only
  double test_auc_pr = 0.0;              // NaN when the test split holds no positive
  // 95% bootstrap intervals of test AUROC and of F1 at the tuned threshold, and the recall at 1% and 5% FPR
  // (resamples from the seed: the same for every label and kind).
  metrics::TestFigures test_figures;
  std::optional<solvers::ProblemOutcome> solver;  // a kind fitted by its own solver: how its fit ended
  Json features;  // what the fitted probe kept of its inputs (ProbeKind::fitted_features); null: every column
  std::vector<float> check_logits;       // best-weight logits of the first test rows (see BinaryTrainingResult)
};

/// The mean of `get(label)` over the labels where it is defined (not NaN); NaN when it is nowhere.
template <typename Get>
double mean_over(const std::vector<TrainedLabel>& labels, Get get) {
  std::vector<double> values;
  values.reserve(labels.size());
  for (const TrainedLabel& t : labels) values.push_back(get(t));
  return metrics::mean_of_defined(values);
}

/// A label that could not be trained, and why.
struct SkippedLabel {
  std::string label;
  std::string reason;
};

struct BinaryTrainingResult {
  ProbeShape shape;
  std::vector<TrainedLabel> labels;  // in label_names order; probe k of `best` is labels[k]
  std::vector<SkippedLabel> skipped;
  // Selected labels without a single example in the file (a reference file lists all 45 actions), untrained.
  std::vector<std::string> without_examples;
  ProbeBank best;                    // the best-epoch weights of every probe (the ones saved)
  at::Tensor final_values;           // the weights after the last epoch each probe ran, laid out as best.values()
  at::Tensor check_inputs;           // [n, H] float32 CPU: the first test rows, for checking saved files
  std::vector<int64_t> check_offsets;  // an every-token kind: the row offsets of check_inputs' texts; else empty
  int64_t epochs_run = 0;            // epochs until the last probe stopped
  double seconds = 0.0;
};

/// What a report and the multi-layer summaries need of one file's training, without the tensors.
struct LayerOutcome {
  int64_t layer = -1;
  std::string activations_path;
  std::string directory;  // where its probes and metrics were written
  std::vector<TrainedLabel> labels;
  std::vector<SkippedLabel> skipped;
  int64_t epochs_run = 0;
  double seconds = 0.0;
  std::vector<std::string> without_examples;
};

/// The training loss of a batch: BCEWithLogitsLoss(pos_weight) of logits [B, K] (fp32) against rows `rows` [B]
/// of the 0/1 targets [N, K]. Adds each probe's mean loss over the batch to `loss_sum` [K] and returns the
/// gradient of that mean by the logits, [B, K] fp32 (one fused kernel on a CUDA GPU).
at::Tensor batch_loss_gradient(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& rows,
                               const at::Tensor& pos_weight, at::Tensor& loss_sum);

/// Trains one-vs-rest probes for the labels of `file` on `device` in `dtype`; logs and shows progress as
/// `progress_label` (e.g. "layer 25"). Labels without any example in the file are left out (listed in
/// without_examples); the others without a positive or a negative example in the train or validation split
/// are skipped with a warning; throws if none is left.
BinaryTrainingResult train_binary_probes(const activations::ActivationFile& file, const BinaryTrainingOptions& options,
                                         at::Device device, at::ScalarType dtype, const std::string& progress_label);

}  // namespace probekit::probes
