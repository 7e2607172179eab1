// Multiclass probe training (the reference's train_probes.py): one softmax probe over all label_names,
// cross-entropy, AdamW, no scheduler and no early stopping; the best epoch by validation accuracy is saved
// as best_probe, the last as final_probe, and the test metrics use the final weights as the reference's do.
// A kind that fits directly (logistic: multinomial, as sklearn's default) is fitted on the whole train split by
// its own solver instead; its fitted weights are both probes, recorded as epoch 1.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "activations/activation_store.h"
#include "metrics/metrics.h"
#include "probes/probe_bank.h"
#include "probes/training_options.h"

namespace probekit::probes {

/// The reference's (train_probes.py) defaults.
struct MulticlassTrainingOptions : TrainingOptions {
  MulticlassTrainingOptions() : TrainingOptions(/*batch_size=*/32, /*epochs=*/20, /*lr=*/1e-3, /*weight_decay=*/1e-4) {}
};

/// The reference's training_history.json, plus the best epoch.
struct MulticlassHistory {
  std::vector<double> train_loss, val_loss, val_accuracy;
  int64_t best_epoch = 0;  // 1-based
  double best_val_accuracy = 0.0;
};

struct MulticlassTrainingResult {
  ProbeBank final_probe;  // one probe: the weights after the last epoch
  ProbeBank best_probe;   // one probe: the weights of the best validation accuracy
  std::vector<std::string> class_names;
  MulticlassHistory history;
  metrics::MulticlassMetrics test;  // with the final weights
  double test_loss = 0.0;
  at::Tensor check_inputs, check_logits;  // the first test rows and the final probe's logits on them
  double seconds = 0.0;
  std::optional<solvers::ProblemOutcome> solver;  // a kind fitted by its own solver: how its fit ended
};

/// Trains one multiclass probe on `file` on `device` in `dtype`, showing progress as `progress_label`.
MulticlassTrainingResult train_multiclass_probe(const activations::ActivationFile& file,
                                                const MulticlassTrainingOptions& options, at::Device device,
                                                at::ScalarType dtype, const std::string& progress_label);

struct MulticlassRunOptions {
  std::string activations;
  std::string output_dir = "./data/probes";
  MulticlassTrainingOptions training;
  std::string device = "auto";
  std::string dtype = "auto";  // auto trains in fp32 on every device
  bool overwrite = false;      // replace an existing, non-empty output directory
  bool json = false;           // the tool prints the summary as JSON on stdout
};

/// Trains and writes best_probe.safetensors, final_probe.safetensors, test_metrics.json,
/// training_history.json, logits_check.safetensors and probes.json (what inference reads: the best probe, its
/// classes and how the activations were made); returns the summary that --json prints.
Json run_multiclass_training(const MulticlassRunOptions& options);

/// test_metrics.json: the reference's keys (accuracy, macro and micro precision/recall/F1, per_class,
/// confusion_matrix) plus top_3_accuracy, the matrix's labels and the test loss.
Json multiclass_metrics_json(const MulticlassTrainingResult& result);

}  // namespace probekit::probes
