// A whole train_binary_probes run: every activation file's probes trained and written in the reference's
// layout, plus what we add (probes.json, tuned thresholds, report.html).
//
// One file:      <output>/probe_{label}.safetensors, metrics_{label}.json, aggregate_metrics.json, probes.json,
//                logits_check.safetensors, report.html
// Several files: <output>/layer_{L}/ (the same, except report.html) for each file, and
//                <output>/per_action_layer_analysis.json, training_summary.json, report.html
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "probes/binary_trainer.h"

namespace probekit::probes {

struct BinaryRunOptions {
  std::vector<std::string> activations;  // files, or directories of layer_{L}_activations.h5
  std::string output_dir = "./data/probes_binary";
  BinaryTrainingOptions training;
  std::string device = "auto";
  std::string dtype = "auto";  // auto trains in fp32 on every device
  int64_t num_workers = 8;     // the reference's flag, recorded only: all probes train as one batched problem
  bool overwrite = false;      // replace an existing, non-empty output directory
  bool json = false;           // the tool prints the summary as JSON on stdout
};

/// Trains and writes everything; returns the summary that --json prints.
Json run_binary_training(const BinaryRunOptions& options);

/// metrics_{label}.json: the reference's keys (action, accuracy, precision, recall, f1, auc_roc, auc_pr,
/// confusion_matrix, history) plus the tuned threshold's block, class balance and evaluated_weights.
Json label_metrics_json(const TrainedLabel& label, bool with_history);

/// aggregate_metrics.json of one file's probes.
Json aggregate_metrics_json(const LayerOutcome& layer, int64_t num_workers);

/// per_action_layer_analysis.json: for each label, the layer with the best validation AUROC.
Json per_action_layer_analysis_json(const std::vector<LayerOutcome>& layers);

}  // namespace probekit::probes
