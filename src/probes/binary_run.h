// A whole train_binary_probes run: every activation file's probes trained and written in the reference's
// layout, plus what we add (probes.json, tuned thresholds, report.html).
//
// One file:      <output>/probe_{label}.safetensors, metrics_{label}.json, aggregate_metrics.json, probes.json,
//                logits_check.safetensors, report.html
// Several files: <output>/layer_{L}/ (the same, except report.html) for each file, and
//                <output>/per_action_layer_analysis.json, training_summary.json, report.html
// Several kinds (--model-type linear,logistic): <output>/<kind>/ as above for each kind, and
//                <output>/comparison.json, report.html comparing them (comparison.h)
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "device/torch/gpu_utils.h"
#include "probes/binary_trainer.h"

namespace probekit::probes {

struct BinaryRunOptions {
  std::vector<std::string> activations;  // files, or directories of layer_{L}_activations.h5
  std::string output_dir = "./data/probes_binary";
  BinaryTrainingOptions training;
  // The kinds --model-type lists; with more than one, each is trained into <output_dir>/<kind> and compared.
  // training.kind is the first.
  std::vector<const ProbeKind*> kinds = {training.kind};
  std::string device = "auto";
  std::string dtype = "auto";  // auto trains in fp32 on every device
  int64_t num_workers = 8;     // the reference's flag, recorded only: all probes train as one batched problem
  bool overwrite = false;      // replace an existing, non-empty output directory
  bool json = false;           // the tool prints the summary as JSON on stdout
  // --calibrate-on: ordinary data's capture, on whose layer files each layer's probes get their threshold at
  // --target-fpr (calibration.h); empty: none.
  std::string calibrate_on;
  double target_fpr = 0.01;
  // --eval-file: a second capture (another distribution, longer conversations) each layer's probes are scored on,
  // with the test split's figures, into eval_metrics.json (evaluation.h); empty: none.
  std::string eval_file;
};

/// Trains and writes everything; returns the summary that --json prints.
Json run_binary_training(const BinaryRunOptions& options);

/// What a run reads and where it trains, checked before any training.
struct BinaryRunPlan {
  std::vector<std::string> files;  // the activation files
  std::vector<std::string> inputs;  // every file the run reads: the output directory may hold none of them
  std::vector<int64_t> layers;     // of each file
  device::ComputeTarget target;
};

/// Checks the options and finds the files, their layers and the device.
BinaryRunPlan plan_binary_run(const BinaryRunOptions& options);

/// One kind's run over every file.
struct KindRun {
  std::vector<LayerOutcome> outcomes;  // one per file
  Json summary_layers;                 // their entries of the --json summary
  Json config;                         // the flags, device and dtype, as report.html shows them
};

/// Trains options.training.kind on every file of `plan` and writes its outputs into `directory` (the layout above
/// for one kind), naming them `shown_directory` in logs and summaries (the final place of a staged directory).
KindRun train_kind(const BinaryRunOptions& options, const BinaryRunPlan& plan, const std::string& directory,
                   const std::string& shown_directory);

/// The key of a false-positive rate in the recall_at_fpr blocks: "0.01", "0.05".
std::string fpr_key(double fpr);

/// An interval as [low, high], null ends where it is undefined.
Json interval_json(const metrics::Interval& interval);

/// A recall_at_fpr block: keyed by fpr_key, each {"value", "ci95", "threshold" (a probability), "threshold_logit"}.
Json recall_at_fpr_json(const std::vector<metrics::RecallAtFpr>& points);

/// The mean over `labels` of their recall at each false-positive rate, keyed as recall_at_fpr_json.
Json average_recall_at_fpr(const std::vector<TrainedLabel>& labels);

/// metrics_{label}.json: the reference's keys (action, accuracy, precision, recall, f1, auc_roc, auc_pr,
/// confusion_matrix, history) plus the tuned threshold's block, class balance, evaluated_weights, the bootstrap
/// intervals, recall_at_fpr and, for a fitted kind, how its solver ended.
Json label_metrics_json(const TrainedLabel& label, bool with_history);

/// aggregate_metrics.json of one file's probes.
Json aggregate_metrics_json(const LayerOutcome& layer, int64_t num_workers);

/// per_action_layer_analysis.json: for each label, the layer with the best validation AUROC.
Json per_action_layer_analysis_json(const std::vector<LayerOutcome>& layers);

}  // namespace probekit::probes
