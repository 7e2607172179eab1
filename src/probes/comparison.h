// train_binary_probes --model-type linear,logistic,mean-diff: each kind trained on the same files into
// <output>/<kind>/ (its own metrics, probes and report), then compared label by label on the test split:
// AUROC, F1 at the validation-tuned threshold and recall at 1% and 5% FPR, each with its 95% bootstrap interval.
// Every kind's intervals come from the same resamples (the seed's), so the kinds are compared on paired draws.
//
// <output>/comparison.json: {"kinds", "seed", "bootstrap_resamples", "false_positive_rates",
//   "layers": [{"layer", "activations", "kinds": {kind: {"directory", "mean_auc_roc", "mean_f1_tuned",
//               "mean_recall_at_fpr", "seconds"}},
//               "labels": [{"label", kind: {"auc_roc", "auc_roc_ci95", "f1_tuned", "f1_tuned_ci95",
//                                          "recall_at_fpr"}}]}]}
// <output>/report.html: one table per layer, a row per label and a column group per kind.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "probes/binary_run.h"

namespace probekit::probes {

/// The runs of the kinds compared, in --model-type order.
using KindRuns = std::vector<std::pair<const ProbeKind*, KindRun>>;

/// Trains every kind of options.kinds and writes the comparison; returns the summary that --json prints.
Json run_kind_comparison(const BinaryRunOptions& options, const BinaryRunPlan& plan);

/// comparison.json of runs over the same files.
Json comparison_json(const KindRuns& runs, const BinaryRunOptions& options);

/// The report.html of a comparison, from its comparison.json.
std::string render_comparison_report(const Json& comparison);

}  // namespace probekit::probes
