// Recall at a false-positive rate on cases worked out by hand and against a brute force over every threshold,
// the resampled statistics against the same statistics of the explicitly resampled lists, the percentile rule,
// and the bootstrap's determinism under a seed.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "common/counter_random.h"
#include "metrics/intervals.h"
#include "metrics/metrics.h"

using namespace probekit;
using namespace probekit::metrics;

namespace {

// Scores 0.9 .. 0.2, labels P N P P N N P N: four of each.
const std::vector<int> kLabels = {1, 0, 1, 1, 0, 0, 1, 0};
const std::vector<double> kScores = {0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2};

void check_point(const RecallAtFpr& point, double recall, double threshold) {
  INFO("max FPR " << point.max_fpr << ": expected recall " << recall << " at " << threshold << ", got "
                  << point.value << " at " << point.threshold);
  CHECK(point.value == doctest::Approx(recall).epsilon(1e-12));
  CHECK(point.threshold == doctest::Approx(threshold).epsilon(1e-12));
}

// The largest recall over every threshold (each distinct score, and above them all) whose FPR is at most max_fpr.
double brute_force_recall(const std::vector<int>& labels, const std::vector<double>& scores, double max_fpr) {
  std::vector<double> thresholds = scores;
  thresholds.push_back(1e300);
  double best = 0.0;
  for (double t : thresholds) {
    ConfusionCounts c = confusion_at(labels, scores, t);
    double fpr = static_cast<double>(c.false_positive) / static_cast<double>(c.false_positive + c.true_negative);
    double recall = static_cast<double>(c.true_positive) / static_cast<double>(c.true_positive + c.false_negative);
    if (fpr <= max_fpr + 1e-12) best = std::max(best, recall);
  }
  return best;
}

}  // namespace

TEST_CASE("recall at a false-positive rate, by hand") {
  // 0 allowed: 0.9 (P) passes, 0.8 (N) would be one false positive: recall 1/4, threshold (0.9 + 0.8) / 2.
  check_point(recall_at_fpr(kLabels, kScores, 0.0), 0.25, 0.85);
  // 0.25 of 4 negatives allows 1: down to 0.6 (3 P, 1 N); 0.5 (N) would be the second: threshold 0.55.
  check_point(recall_at_fpr(kLabels, kScores, 0.25), 0.75, 0.55);
  // 0.5 allows 2: down to 0.5 (3 P, 2 N); 0.4 would be the third.
  check_point(recall_at_fpr(kLabels, kScores, 0.5), 0.75, 0.45);
  // Everything accepted: the lowest score.
  check_point(recall_at_fpr(kLabels, kScores, 1.0), 1.0, 0.2);
  // The top score a negative and none allowed: nothing passes; the threshold sits just above the top score.
  RecallAtFpr none = recall_at_fpr({0, 1}, {0.9, 0.1}, 0.0);
  CHECK(none.value == 0.0);
  // Above it in fp32 too, as inference computes the probabilities it compares (regression: a double's step above it,
  // which the top score recomputed in fp32 could round past).
  CHECK(none.threshold > 0.9);
  CHECK(none.threshold < 0.9 + 1e-6);
  // 0.1 rounds up in fp32 (to 0.100000001): the threshold lies above that too.
  const RecallAtFpr rounded_up = recall_at_fpr({0, 1}, {0.1, 0.05}, 0.0);
  CHECK(rounded_up.threshold > static_cast<double>(static_cast<float>(0.1)));
  // A tied group counts whole: 0.5 holds a positive and a negative.
  check_point(recall_at_fpr({1, 0, 1, 0}, {0.5, 0.5, 0.1, 0.1}, 0.49), 0.0,
              static_cast<double>(std::nextafter(0.5f, 1.0f)));
  // Neighbouring doubles have no middle: the lowest accepted score, never the rejected one the middle rounds to
  // (regression: 0.5, which accepted the negative).
  const double above_half = std::nextafter(0.5, 1.0);
  const RecallAtFpr neighbours = recall_at_fpr({1, 0}, {above_half, 0.5}, 0.0);
  CHECK(neighbours.value == 1.0);
  CHECK(neighbours.threshold == above_half);
  check_point(recall_at_fpr({1, 0, 1, 0}, {0.5, 0.5, 0.1, 0.1}, 0.5), 0.5, 0.3);
  // Undefined without positives or without negatives.
  CHECK(std::isnan(recall_at_fpr({0, 0}, {0.1, 0.2}, 0.05).value));
  CHECK(std::isnan(recall_at_fpr({1, 1}, {0.1, 0.2}, 0.05).value));
}

TEST_CASE("recall at 1% FPR of 600 negatives allows 6 false positives, not 5") {
  // Six negatives on top, then the one positive, then 594 negatives: 0.01 * 600 must round to 6.
  std::vector<int> labels(601, 0);
  std::vector<double> scores;
  for (int i = 0; i < 6; ++i) scores.push_back(10.0 - i);
  scores.push_back(4.5);
  labels[6] = 1;
  for (int i = 0; i < 594; ++i) scores.push_back(4.0 - 0.001 * i);
  check_point(recall_at_fpr(labels, scores, 0.01), 1.0, (4.5 + 4.0) / 2.0);
}

TEST_CASE("recall at a false-positive rate equals a brute force over every threshold") {
  for (uint64_t trial = 0; trial < 50; ++trial) {
    std::vector<int> labels;
    std::vector<double> scores;
    for (uint64_t i = 0; i < 60; ++i) {
      labels.push_back(draw_uniform(trial, 2 * i) < 0.3 ? 1 : 0);
      // Rounded so that ties occur.
      scores.push_back(std::round(draw_uniform(trial, 2 * i + 1) * 20.0 + labels.back() * 4.0) / 4.0);
    }
    for (double fpr : {0.0, 0.01, 0.05, 0.1, 0.3}) {
      RecallAtFpr point = recall_at_fpr(labels, scores, fpr);
      INFO("trial " << trial << ", max FPR " << fpr);
      CHECK(point.value == doctest::Approx(brute_force_recall(labels, scores, fpr)).epsilon(1e-12));
      // The threshold gives that recall and keeps to the rate.
      ConfusionCounts c = confusion_at(labels, scores, point.threshold);
      CHECK(static_cast<double>(c.true_positive) / static_cast<double>(c.true_positive + c.false_negative) ==
            doctest::Approx(point.value).epsilon(1e-12));
      CHECK(static_cast<double>(c.false_positive) <= fpr * static_cast<double>(c.false_positive + c.true_negative) + 1e-9);
    }
  }
}

TEST_CASE("statistics of a resample equal those of the explicitly resampled lists") {
  Bootstrap bootstrap(static_cast<int64_t>(kLabels.size()), 5, 42);
  RankedExamples ranked(kLabels, kScores);
  std::vector<uint32_t> counts;
  for (int64_t r = 0; r < 5; ++r) {
    bootstrap.draw(r, counts);
    std::vector<int> labels;
    std::vector<double> scores;
    for (size_t i = 0; i < counts.size(); ++i) {
      for (uint32_t k = 0; k < counts[i]; ++k) {
        labels.push_back(kLabels[i]);
        scores.push_back(kScores[i]);
      }
    }
    REQUIRE(labels.size() == kLabels.size());
    GroupCounts grouped = ranked.count(counts);
    INFO("resample " << r);
    double auc = roc_auc(labels, scores);
    CHECK((std::isnan(auc) ? std::isnan(roc_auc(grouped)) : roc_auc(grouped) == doctest::Approx(auc).epsilon(1e-12)));
    CHECK(f1_at(ranked, grouped, 0.55) == doctest::Approx(metrics_at(labels, scores, 0.55).f1).epsilon(1e-12));
    double recall = recall_at_fpr(labels, scores, 0.25).value;
    double resampled = recall_at_fpr(ranked, grouped, 0.25).value;
    CHECK((std::isnan(recall) ? std::isnan(resampled) : resampled == doctest::Approx(recall).epsilon(1e-12)));
  }
}

TEST_CASE("percentile intervals interpolate as numpy.percentile and leave out NaN") {
  // numpy.percentile([1, 2, 3, 4, 5], [2.5, 97.5]) = [1.1, 4.9].
  Interval i = percentile_interval({5, 1, std::nan(""), 3, 2, 4});
  CHECK(i.low == doctest::Approx(1.1).epsilon(1e-12));
  CHECK(i.high == doctest::Approx(4.9).epsilon(1e-12));
  CHECK(std::isnan(percentile_interval({std::nan("")}).low));
}

TEST_CASE("the bootstrap is a function of its seed") {
  Bootstrap a(100, 3, 7), b(100, 3, 7), c(100, 3, 8);
  std::vector<uint32_t> ca, cb, cc;
  a.draw(2, ca);
  b.draw(2, cb);
  c.draw(2, cc);
  CHECK(ca == cb);
  CHECK(ca != cc);
  uint32_t total = 0;
  for (uint32_t k : ca) total += k;
  CHECK(total == 100);

  std::vector<int> labels;
  std::vector<double> scores;
  for (uint64_t i = 0; i < 200; ++i) {
    labels.push_back(i % 3 == 0 ? 1 : 0);
    scores.push_back(draw_uniform(5, i) + labels.back() * 0.4);
  }
  IntervalOptions options;
  options.seed = 3;
  TestFigures first = test_figures({labels}, {scores}, {0.7}, options)[0];
  TestFigures again = test_figures({labels}, {scores}, {0.7}, options)[0];
  CHECK(first.auc_roc_ci95.low == again.auc_roc_ci95.low);
  CHECK(first.recall_at_fpr[0].ci95.high == again.recall_at_fpr[0].ci95.high);
  CHECK(first.recall_at_fpr.size() == 2);
  // The intervals hold the point values.
  double auc = roc_auc(labels, scores);
  CHECK(first.auc_roc_ci95.low <= auc);
  CHECK(auc <= first.auc_roc_ci95.high);
  for (const RecallAtFpr& point : first.recall_at_fpr) {
    CHECK(point.ci95.low <= point.value);
    CHECK(point.value <= point.ci95.high);
  }
  options.seed = 4;
  TestFigures other = test_figures({labels}, {scores}, {0.7}, options)[0];
  CHECK(other.auc_roc_ci95.low != first.auc_roc_ci95.low);
}

TEST_CASE("a perfect separation has intervals of one point") {
  std::vector<int> labels = {1, 1, 1, 0, 0, 0, 0, 0};
  std::vector<double> scores = {8, 7, 6, 5, 4, 3, 2, 1};
  TestFigures f = test_figures({labels}, {scores}, {5.5}, IntervalOptions{})[0];
  CHECK(f.auc_roc_ci95.low == 1.0);
  CHECK(f.auc_roc_ci95.high == 1.0);
  CHECK(f.recall_at_fpr[0].value == 1.0);
  CHECK(f.recall_at_fpr[0].ci95.low == 1.0);
  CHECK(f.recall_at_fpr[0].threshold == 5.5);  // between the lowest positive (6) and the highest negative (5)
}
