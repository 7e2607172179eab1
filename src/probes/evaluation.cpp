#include "probes/evaluation.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/files.h"
#include "metrics/intervals.h"
#include "metrics/metrics.h"
#include "probes/binary_run.h"
#include "probes/binary_paths.h"
#include "probes/file_scores.h"

namespace probekit::probes {

Json evaluate_layer(const std::string& dir, const std::string& eval_file, uint64_t seed) {
  const LayerFileScores scored =
      score_layer_file(dir, eval_file, "the --eval-file capture", "--eval-file scores binary probes (train_binary_probes)");
  const ProbeSet& set = scored.set;
  const std::vector<int64_t> labels = file_labels(scored.file);
  const std::vector<std::string>& names = scored.file.attributes.label_names;
  std::vector<std::vector<int>> truths;
  std::vector<std::vector<double>> scores;
  std::vector<double> thresholds;
  for (size_t k = 0; k < set.probes().size(); ++k) {
    const ProbeInfo& probe = set.probes()[k];
    const auto index = static_cast<int64_t>(std::find(names.begin(), names.end(), probe.label) - names.begin());
    std::vector<int> truth;
    for (int64_t label : labels) truth.push_back(label == index ? 1 : 0);
    truths.push_back(std::move(truth));
    scores.push_back(column_scores(scored.logits, static_cast<int64_t>(k)));
    thresholds.push_back(probe.threshold_logit);
  }
  metrics::IntervalOptions intervals;
  intervals.seed = seed;
  const std::vector<metrics::TestFigures> figures = metrics::test_figures(truths, scores, thresholds, intervals);
  Json rows = Json::array();
  for (size_t k = 0; k < set.probes().size(); ++k) {
    const auto positives = std::count(truths[k].begin(), truths[k].end(), 1);
    rows.push_back({{"label", set.probes()[k].label},
                    {"positives", positives},
                    {"auc_roc", metrics::roc_auc(truths[k], scores[k])},
                    {"auc_roc_ci95", interval_json(figures[k].auc_roc_ci95)},
                    {"auc_pr", metrics::average_precision(truths[k], scores[k])},
                    {"recall_at_fpr", recall_at_fpr_json(figures[k].recall_at_fpr)}});
    // The layer, not `dir`: that is the run's staging folder, gone once the run ends.
    if (positives == 0) {
      spdlog::warn("layer {}: '{}' has no example in {}: its figures are undefined", set.layer(), set.probes()[k].label,
                   eval_file);
    }
  }
  Json out = {{"source", eval_file}, {"examples", labels.size()}, {"labels", rows}};
  write_json_file(dir + "/eval_metrics.json", out);
  return out;
}

}  // namespace probekit::probes
