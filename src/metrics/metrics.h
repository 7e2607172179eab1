// Classification metrics with scikit-learn's definitions, computed in doubles and free of LibTorch, so that
// the probe trainers' numbers can be checked against sklearn to 1e-9 for the same scores.
//
// Binary labels are 0/1 with 1 the positive class; a prediction is positive when score >= threshold. Scores
// may be probabilities or logits: the ranking metrics only depend on their order.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace probekit::metrics {

/// The probability of a logit, 1 / (1 + e^-logit): binary probes score in logits, report in probabilities.
inline double sigmoid(double logit) { return 1.0 / (1.0 + std::exp(-logit)); }

/// The mean of the values that are not NaN (an AUROC of a split with one class is NaN); NaN when none is.
double mean_of_defined(const std::vector<double>& values);

/// sklearn's confusion_matrix(labels, preds).ravel() for binary labels.
struct ConfusionCounts {
  int64_t true_negative = 0;
  int64_t false_positive = 0;
  int64_t false_negative = 0;
  int64_t true_positive = 0;

  int64_t total() const { return true_negative + false_positive + false_negative + true_positive; }
};

/// Precision, recall and F1 of one class's predictions (sklearn, zero_division=0).
struct PrecisionRecall {
  double precision = 0.0;
  double recall = 0.0;
  double f1 = 0.0;
};

/// The metrics of one set of hard predictions (sklearn, average='binary', zero_division=0).
struct ThresholdMetrics : PrecisionRecall {
  double threshold = 0.0;
  double accuracy = 0.0;
  ConfusionCounts confusion;
};

/// Counts of `score >= threshold` against the labels.
ConfusionCounts confusion_at(const std::vector<int>& labels, const std::vector<double>& scores, double threshold);

/// Accuracy, precision, recall and F1 of a confusion matrix, with sklearn's zero_division=0.
ThresholdMetrics metrics_from_confusion(const ConfusionCounts& confusion, double threshold);

/// Accuracy, precision, recall and F1 of `score >= threshold` predictions.
ThresholdMetrics metrics_at(const std::vector<int>& labels, const std::vector<double>& scores, double threshold);

/// sklearn.metrics.roc_auc_score: the trapezoid under the ROC curve over distinct thresholds (tied scores
/// form one diagonal step). NaN when the labels hold only one class, where sklearn raises.
double roc_auc(const std::vector<int>& labels, const std::vector<double>& scores);

/// sklearn.metrics.average_precision_score: sum over distinct thresholds, descending, of
/// (R_n - R_{n-1}) * P_n. NaN when there is no positive label.
double average_precision(const std::vector<int>& labels, const std::vector<double>& scores);

/// The threshold that maximises F1 of `score >= threshold`. The candidates are the distinct scores; on equal
/// F1 the highest wins (the fewest positive predictions). Every threshold between the winning score s and the
/// next lower distinct score s' predicts the same, so the one returned is the middle (s + s') / 2, or s when
/// it is the lowest score. Requires at least one positive label.
ThresholdMetrics tune_threshold_for_f1(const std::vector<int>& labels, const std::vector<double>& scores);

/// Per-class figures of a multiclass evaluation (sklearn's precision_recall_fscore_support, average=None).
struct ClassMetrics : PrecisionRecall {
  int64_t label = 0;
  int64_t support = 0;
};

/// sklearn's multiclass metrics over the labels present in y_true or y_pred (its default label set).
struct MulticlassMetrics {
  double accuracy = 0.0;
  double precision_macro = 0.0, recall_macro = 0.0, f1_macro = 0.0;
  double precision_micro = 0.0, recall_micro = 0.0, f1_micro = 0.0;
  int top_k = 3;
  double top_k_accuracy = 0.0;
  std::vector<int64_t> labels;  // sorted; the rows and columns of `confusion`
  std::vector<ClassMetrics> per_class;
  std::vector<std::vector<int64_t>> confusion;  // [true label][predicted label]
};

/// Multiclass metrics of predictions `predicted` for `truth`; `scores` ([N, classes] row-major) feeds
/// sklearn's top_k_accuracy_score (ties rank the higher class index first, as its stable argsort reversed).
MulticlassMetrics multiclass_metrics(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted,
                                     const std::vector<double>& scores, int64_t classes, int top_k = 3);

}  // namespace probekit::metrics
