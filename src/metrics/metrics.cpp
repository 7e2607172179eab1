#include "metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/error.h"

namespace probekit::metrics {

namespace {

// One point per distinct score, from the highest down: counts of positives and negatives scoring >= it.
// This is sklearn's _binary_clf_curve, kept in integers so no rounding happens before the final division.
struct CurvePoint {
  double threshold;
  int64_t true_positives;
  int64_t false_positives;
};

std::vector<CurvePoint> binary_curve(const std::vector<int>& labels, const std::vector<double>& scores) {
  if (labels.size() != scores.size()) {
    fail_input("metrics: {} labels but {} scores", labels.size(), scores.size());
  }
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  std::vector<CurvePoint> curve;
  int64_t positives = 0, negatives = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (labels[order[i]] != 0) {
      ++positives;
    } else {
      ++negatives;
    }
    bool last_of_tie = i + 1 == order.size() || scores[order[i + 1]] != scores[order[i]];
    if (last_of_tie) curve.push_back({scores[order[i]], positives, negatives});
  }
  return curve;
}

double safe_ratio(double numerator, double denominator) { return denominator == 0.0 ? 0.0 : numerator / denominator; }

// sklearn's F1 since 1.3: 2tp / (2tp + fp + fn), 0 when that denominator is 0.
double f1_from_counts(int64_t tp, int64_t fp, int64_t fn) {
  return safe_ratio(2.0 * static_cast<double>(tp), static_cast<double>(2 * tp + fp + fn));
}

// The one formula of precision and recall: from the counts, with sklearn's zero_division=0.
PrecisionRecall precision_recall(int64_t tp, int64_t fp, int64_t fn) {
  PrecisionRecall p;
  p.precision = safe_ratio(static_cast<double>(tp), static_cast<double>(tp + fp));
  p.recall = safe_ratio(static_cast<double>(tp), static_cast<double>(tp + fn));
  p.f1 = f1_from_counts(tp, fp, fn);
  return p;
}

}  // namespace

double mean_of_defined(const std::vector<double>& values) {
  double sum = 0.0;
  int64_t count = 0;
  for (double v : values) {
    if (!std::isnan(v)) {
      sum += v;
      ++count;
    }
  }
  return count == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(count);
}

ConfusionCounts confusion_at(const std::vector<int>& labels, const std::vector<double>& scores, double threshold) {
  if (labels.size() != scores.size()) {
    fail_input("metrics: {} labels but {} scores", labels.size(), scores.size());
  }
  ConfusionCounts c;
  for (size_t i = 0; i < labels.size(); ++i) {
    bool predicted = scores[i] >= threshold;
    if (labels[i] != 0) {
      (predicted ? c.true_positive : c.false_negative) += 1;
    } else {
      (predicted ? c.false_positive : c.true_negative) += 1;
    }
  }
  return c;
}

ThresholdMetrics metrics_from_confusion(const ConfusionCounts& c, double threshold) {
  ThresholdMetrics m;
  m.threshold = threshold;
  m.confusion = c;
  m.accuracy = safe_ratio(static_cast<double>(c.true_positive + c.true_negative), static_cast<double>(c.total()));
  static_cast<PrecisionRecall&>(m) = precision_recall(c.true_positive, c.false_positive, c.false_negative);
  return m;
}

ThresholdMetrics metrics_at(const std::vector<int>& labels, const std::vector<double>& scores, double threshold) {
  return metrics_from_confusion(confusion_at(labels, scores, threshold), threshold);
}

double roc_auc(const std::vector<int>& labels, const std::vector<double>& scores) {
  std::vector<CurvePoint> curve = binary_curve(labels, scores);
  if (curve.empty()) return std::numeric_limits<double>::quiet_NaN();
  int64_t positives = curve.back().true_positives, negatives = curve.back().false_positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  // Twice the area in units of one (negative, positive) pair: exact in integers up to 2^63.
  int64_t doubled_area = 0, previous_tp = 0, previous_fp = 0;
  for (const CurvePoint& point : curve) {
    doubled_area += (point.false_positives - previous_fp) * (point.true_positives + previous_tp);
    previous_tp = point.true_positives;
    previous_fp = point.false_positives;
  }
  return static_cast<double>(doubled_area) / (2.0 * static_cast<double>(positives) * static_cast<double>(negatives));
}

double average_precision(const std::vector<int>& labels, const std::vector<double>& scores) {
  std::vector<CurvePoint> curve = binary_curve(labels, scores);
  if (curve.empty() || curve.back().true_positives == 0) return std::numeric_limits<double>::quiet_NaN();
  auto positives = static_cast<double>(curve.back().true_positives);
  double sum = 0.0;
  int64_t previous_tp = 0;
  for (const CurvePoint& point : curve) {
    double recall_step = static_cast<double>(point.true_positives - previous_tp) / positives;
    double precision = static_cast<double>(point.true_positives) /
                       static_cast<double>(point.true_positives + point.false_positives);
    sum += recall_step * precision;
    previous_tp = point.true_positives;
  }
  return sum;
}

ThresholdMetrics tune_threshold_for_f1(const std::vector<int>& labels, const std::vector<double>& scores) {
  std::vector<CurvePoint> curve = binary_curve(labels, scores);
  if (curve.empty() || curve.back().true_positives == 0) {
    fail_input("metrics: cannot tune a threshold without a positive label");
  }
  int64_t positives = curve.back().true_positives, negatives = curve.back().false_positives;
  // Compared as exact fractions tp / (2tp + fp + fn), so equal F1 values are recognised as ties.
  size_t best = 0;
  int64_t best_numerator = 0, best_denominator = 1;
  for (size_t i = 0; i < curve.size(); ++i) {
    int64_t numerator = curve[i].true_positives;
    int64_t denominator = 2 * curve[i].true_positives + curve[i].false_positives + (positives - curve[i].true_positives);
    if (i == 0 || numerator * best_denominator > best_numerator * denominator) {
      best = i;
      best_numerator = numerator;
      best_denominator = denominator;
    }
  }
  ConfusionCounts c;
  c.true_positive = curve[best].true_positives;
  c.false_positive = curve[best].false_positives;
  c.false_negative = positives - c.true_positive;
  c.true_negative = negatives - c.false_positive;
  double threshold = curve[best].threshold;
  if (best + 1 < curve.size()) threshold = (threshold + curve[best + 1].threshold) / 2.0;
  return metrics_from_confusion(c, threshold);
}

MulticlassMetrics multiclass_metrics(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted,
                                     const std::vector<double>& scores, int64_t classes, int top_k) {
  size_t n = truth.size();
  if (predicted.size() != n || scores.size() != n * static_cast<size_t>(classes)) {
    fail_input("metrics: {} labels, {} predictions and {} scores for {} classes", n, predicted.size(), scores.size(),
               classes);
  }
  for (size_t i = 0; i < n; ++i) {
    if (truth[i] < 0 || truth[i] >= classes || predicted[i] < 0 || predicted[i] >= classes) {
      fail_input("metrics: row {} has label {} / prediction {} outside 0..{}", i, truth[i], predicted[i], classes - 1);
    }
  }
  MulticlassMetrics m;
  m.top_k = top_k;
  std::vector<bool> present(static_cast<size_t>(classes), false);
  for (size_t i = 0; i < n; ++i) present[truth[i]] = present[predicted[i]] = true;
  std::vector<int64_t> position(static_cast<size_t>(classes), -1);
  for (int64_t c = 0; c < classes; ++c) {
    if (present[c]) {
      position[c] = static_cast<int64_t>(m.labels.size());
      m.labels.push_back(c);
    }
  }
  size_t used = m.labels.size();
  m.confusion.assign(used, std::vector<int64_t>(used, 0));
  int64_t correct = 0, top_k_hits = 0;
  for (size_t i = 0; i < n; ++i) {
    m.confusion[position[truth[i]]][position[predicted[i]]] += 1;
    if (truth[i] == predicted[i]) ++correct;
    // Rank of the true class: classes scoring higher, and equal-scoring classes of a higher index.
    const double* row = &scores[i * static_cast<size_t>(classes)];
    double own = row[truth[i]];
    int64_t ahead = 0;
    for (int64_t c = 0; c < classes; ++c) {
      if (row[c] > own || (row[c] == own && c > truth[i])) ++ahead;
    }
    if (ahead < top_k) ++top_k_hits;
  }
  auto total = static_cast<double>(n);
  m.accuracy = safe_ratio(static_cast<double>(correct), total);
  m.top_k_accuracy = safe_ratio(static_cast<double>(top_k_hits), total);

  int64_t sum_tp = 0, sum_fp = 0, sum_fn = 0;
  for (size_t a = 0; a < used; ++a) {
    int64_t tp = m.confusion[a][a], predicted_as = 0, support = 0;
    for (size_t b = 0; b < used; ++b) {
      predicted_as += m.confusion[b][a];
      support += m.confusion[a][b];
    }
    int64_t fp = predicted_as - tp, fn = support - tp;
    ClassMetrics cm;
    static_cast<PrecisionRecall&>(cm) = precision_recall(tp, fp, fn);
    cm.label = m.labels[a];
    cm.support = support;
    m.per_class.push_back(cm);
    m.precision_macro += cm.precision;
    m.recall_macro += cm.recall;
    m.f1_macro += cm.f1;
    sum_tp += tp;
    sum_fp += fp;
    sum_fn += fn;
  }
  if (used > 0) {
    m.precision_macro /= static_cast<double>(used);
    m.recall_macro /= static_cast<double>(used);
    m.f1_macro /= static_cast<double>(used);
  }
  const PrecisionRecall micro = precision_recall(sum_tp, sum_fp, sum_fn);
  m.precision_micro = micro.precision;
  m.recall_micro = micro.recall;
  m.f1_micro = micro.f1;
  return m;
}

}  // namespace probekit::metrics
