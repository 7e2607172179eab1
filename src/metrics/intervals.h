// Recall at a fixed false-positive rate, and percentile-bootstrap intervals of the test metrics, torch-free.
//
// A detector is judged by how many positives it catches while flagging few negatives: recall at 1% and 5% FPR.
// Its uncertainty comes from the test split's size, so every figure gets a 95% percentile-bootstrap interval over
// resamples of the test examples (drawn with replacement, from a seed). The resamples depend on the seed and the
// number of examples only, so every label and every probe kind scored on one test split sees the same resamples
// (paired comparisons).
//
// The examples are sorted by score once; a resample is a count per example, and each statistic of it is one pass
// over the sorted groups of tied scores, with no sort per resample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace probekit::metrics {

/// A two-sided interval; NaN ends when it is undefined.
struct Interval {
  double low = std::numeric_limits<double>::quiet_NaN();
  double high = std::numeric_limits<double>::quiet_NaN();
};

/// The operating point of the lowest threshold whose false-positive rate stays at most `max_fpr`.
struct RecallAtFpr {
  double max_fpr = 0.0;
  double value = std::numeric_limits<double>::quiet_NaN();      // recall; NaN without positives or negatives
  double threshold = std::numeric_limits<double>::quiet_NaN();  // predictions are score >= threshold
  Interval ci95;                                                // filled by test_figures()
};

/// Positives and negatives per group of tied scores, groups by descending score.
struct GroupCounts {
  std::vector<int64_t> positives, negatives;
  int64_t total_positives = 0, total_negatives = 0;
};

/// Binary labels (1 positive) and their scores, sorted once by score.
class RankedExamples {
 public:
  RankedExamples(const std::vector<int>& labels, const std::vector<double>& scores);

  size_t examples() const { return group_of_.size(); }
  /// The distinct scores, descending.
  const std::vector<double>& group_scores() const { return group_scores_; }
  /// The counts of each example once (`counts` empty), or of example i counts[i] times (a bootstrap resample).
  GroupCounts count(const std::vector<uint32_t>& counts = {}) const;

 private:
  std::vector<double> group_scores_;
  std::vector<uint32_t> group_of_;  // per example, its group
  std::vector<uint8_t> positive_;
};

/// Recall at the lowest threshold predicting at most floor(max_fpr * negatives) negatives as positive (the
/// product rounded up when within 1e-9 of a whole number, so 0.01 of 600 negatives allows 6): the largest
/// true-positive rate of sklearn's roc_curve with fpr <= max_fpr. Every threshold between the lowest score it
/// accepts and the next lower score predicts the same; the one returned is their middle (as
/// tune_threshold_for_f1), the lowest score when everything is accepted, and just above the highest score
/// when nothing is.
RecallAtFpr recall_at_fpr(const RankedExamples& ranked, const GroupCounts& counts, double max_fpr);

/// The same, for labels and scores.
RecallAtFpr recall_at_fpr(const std::vector<int>& labels, const std::vector<double>& scores, double max_fpr);

/// A threshold set on ordinary data, which a monitor must leave alone: `score >= threshold` flags at most
/// floor(max_fpr * n) of the n scores (rounded as recall_at_fpr rounds), placed as recall_at_fpr places it.
struct FprThreshold {
  double threshold = std::numeric_limits<double>::quiet_NaN();
  double fpr = 0.0;  // the share of the scores it flags
  Interval ci95;     // the rate's 95% Wilson interval
  int64_t flagged = 0, examples = 0;
};
FprThreshold threshold_at_fpr(const std::vector<double>& scores, double max_fpr);

/// The 95% Wilson score interval of a proportion of `successes` in `trials`.
Interval wilson_interval(int64_t successes, int64_t trials);

/// The 95% Wilson score interval of an observed `proportion` over `trials`.
Interval wilson_interval_at(double proportion, int64_t trials);

/// The fewest examples that resolve a false-positive `rate` (in (0, 1)): where the 95% Wilson interval of that very
/// rate reaches at most twice it (753 at 0.01, 139 at 0.05); fewer examples never resolve it, more always do.
int64_t examples_to_resolve_rate(double rate);

/// AUROC of grouped counts (as roc_auc); NaN without positives or negatives.
double roc_auc(const GroupCounts& counts);

/// F1 of `score >= threshold` predictions for grouped counts (sklearn's zero_division=0).
double f1_at(const RankedExamples& ranked, const GroupCounts& counts, double threshold);

/// Resamples of `examples` test examples with replacement: resample r is `examples` uniform draws from the
/// stream keyed by (seed, r), kept as a count per example.
class Bootstrap {
 public:
  Bootstrap(int64_t examples, int64_t resamples, uint64_t seed);
  int64_t resamples() const { return resamples_; }
  /// Writes resample `r` into `counts` (resized to the examples).
  void draw(int64_t r, std::vector<uint32_t>& counts) const;

 private:
  int64_t examples_, resamples_;
  uint64_t key_;
};

/// The central `confidence` interval of `values` by numpy.percentile's linear interpolation, NaN values
/// (undefined resamples) left out; NaN ends when none is left.
Interval percentile_interval(std::vector<double> values, double confidence = 0.95);

/// How test_figures() bootstraps.
struct IntervalOptions {
  int64_t resamples = 1000;
  uint64_t seed = 0;
  std::vector<double> fprs = {0.01, 0.05};
};

/// One probe's test figures with their intervals.
struct TestFigures {
  Interval auc_roc_ci95;
  Interval f1_ci95;  // F1 at the probe's fixed threshold
  std::vector<RecallAtFpr> recall_at_fpr;  // one per IntervalOptions::fprs
};

/// The figures of several probes scored on the same test examples (one-vs-rest: each its own labels), every
/// probe over the same resamples; `thresholds` fix each probe's F1 threshold.
std::vector<TestFigures> test_figures(const std::vector<std::vector<int>>& labels,
                                      const std::vector<std::vector<double>>& scores,
                                      const std::vector<double>& thresholds, const IntervalOptions& options);

}  // namespace probekit::metrics
