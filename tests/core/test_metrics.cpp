// The probe metrics against scikit-learn's values for the same scores (tests/fixtures/metrics/
// sklearn_cases.json, made by make_sklearn_cases.py), plus small cases worked out by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/json.h"
#include "metrics/metrics.h"
#include "test_paths.h"

using namespace probekit;
using namespace probekit::metrics;

namespace {

constexpr double kTolerance = 1e-9;

const Json& sklearn_cases() {
  static const Json cases = read_json_file(PROBEKIT_FIXTURES "/metrics/sklearn_cases.json");
  return cases;
}

void check_close(const std::string& where, double actual, const Json& expected) {
  INFO(where << ": expected " << expected.dump() << ", got " << actual);
  if (expected.is_null()) {
    CHECK(std::isnan(actual));
  } else {
    CHECK(std::fabs(actual - expected.get<double>()) <= kTolerance);
  }
}

}  // namespace

TEST_CASE("binary metrics equal scikit-learn's on every stored case") {
  const Json& cases = sklearn_cases();
  if (cases.value("provisional", false)) {
    MESSAGE("sklearn_cases.json is provisional (exact-fraction values); regenerate it with scikit-learn");
  }
  REQUIRE(cases.at("binary").size() >= 10);
  for (const Json& c : cases.at("binary")) {
    std::string name = c.at("name");
    auto labels = c.at("y_true").get<std::vector<int>>();
    auto scores = c.at("y_score").get<std::vector<double>>();
    double threshold = c.at("threshold");

    ThresholdMetrics at = metrics_at(labels, scores, threshold);
    check_close(name + " accuracy", at.accuracy, c.at("accuracy"));
    check_close(name + " precision", at.precision, c.at("precision"));
    check_close(name + " recall", at.recall, c.at("recall"));
    check_close(name + " f1", at.f1, c.at("f1"));
    auto confusion = c.at("confusion_matrix").get<std::vector<int64_t>>();
    INFO(name << " confusion matrix [tn, fp, fn, tp] expected " << c.at("confusion_matrix").dump());
    CHECK(at.confusion.true_negative == confusion[0]);
    CHECK(at.confusion.false_positive == confusion[1]);
    CHECK(at.confusion.false_negative == confusion[2]);
    CHECK(at.confusion.true_positive == confusion[3]);

    check_close(name + " roc_auc", roc_auc(labels, scores), c.at("roc_auc"));
    check_close(name + " average_precision", average_precision(labels, scores), c.at("average_precision"));

    ThresholdMetrics tuned = tune_threshold_for_f1(labels, scores);
    check_close(name + " tuned threshold", tuned.threshold, c.at("tuned_threshold"));
    check_close(name + " tuned f1", tuned.f1, c.at("tuned_f1"));
  }
}

TEST_CASE("multiclass metrics equal scikit-learn's on every stored case") {
  for (const Json& c : sklearn_cases().at("multiclass")) {
    std::string name = c.at("name");
    int64_t classes = c.at("classes");
    auto truth = c.at("y_true").get<std::vector<int64_t>>();
    auto predicted = c.at("y_pred").get<std::vector<int64_t>>();
    std::vector<double> scores;
    for (const Json& row : c.at("y_score")) {
      for (const Json& value : row) scores.push_back(value.get<double>());
    }
    MulticlassMetrics m = multiclass_metrics(truth, predicted, scores, classes, 3);
    check_close(name + " accuracy", m.accuracy, c.at("accuracy"));
    check_close(name + " precision_macro", m.precision_macro, c.at("precision_macro"));
    check_close(name + " recall_macro", m.recall_macro, c.at("recall_macro"));
    check_close(name + " f1_macro", m.f1_macro, c.at("f1_macro"));
    check_close(name + " precision_micro", m.precision_micro, c.at("precision_micro"));
    check_close(name + " recall_micro", m.recall_micro, c.at("recall_micro"));
    check_close(name + " f1_micro", m.f1_micro, c.at("f1_micro"));
    check_close(name + " top_3_accuracy", m.top_k_accuracy, c.at("top_3_accuracy"));
    CHECK(m.labels == c.at("labels").get<std::vector<int64_t>>());
    REQUIRE(m.per_class.size() == m.labels.size());
    const Json& per_class = c.at("per_class");
    for (size_t i = 0; i < m.per_class.size(); ++i) {
      std::string where = name + " class " + std::to_string(m.labels[i]);
      check_close(where + " precision", m.per_class[i].precision, per_class.at("precision").at(i));
      check_close(where + " recall", m.per_class[i].recall, per_class.at("recall").at(i));
      check_close(where + " f1", m.per_class[i].f1, per_class.at("f1").at(i));
      CHECK(m.per_class[i].support == per_class.at("support").at(i).get<int64_t>());
    }
    CHECK(m.confusion == c.at("confusion_matrix").get<std::vector<std::vector<int64_t>>>());
  }
}

TEST_CASE("AUROC counts a tie between a positive and a negative as half a pair") {
  // Pairs (positive, negative): (0.9, 0.5) win, (0.9, 0.1) win, (0.5, 0.5) tie, (0.5, 0.1) win -> 3.5 / 4.
  CHECK(roc_auc({1, 1, 0, 0}, {0.9, 0.5, 0.5, 0.1}) == doctest::Approx(0.875).epsilon(1e-15));
  CHECK(std::isnan(roc_auc({1, 1}, {0.2, 0.3})));
}

TEST_CASE("average precision steps over distinct thresholds") {
  // Descending: 0.9 (pos) P=1 R=1/2; 0.8 (neg) P=1/2 R=1/2; 0.7 (pos) P=2/3 R=1.
  // AP = 1/2 * 1 + 0 * 1/2 + 1/2 * 2/3 = 5/6.
  CHECK(average_precision({1, 0, 1}, {0.9, 0.8, 0.7}) == doctest::Approx(5.0 / 6.0).epsilon(1e-15));
  CHECK(std::isnan(average_precision({0, 0}, {0.1, 0.2})));
}

TEST_CASE("the tuned threshold keeps the highest score among equal F1 values, then moves to the gap's middle") {
  // t=0.9: tp 1, fp 0, fn 1 -> F1 2/3; t=0.8: tp 1, fp 1, fn 1 -> 1/2; t=0.7: tp 2, fp 1, fn 0 -> 4/5;
  // t=0.6: tp 2, fp 2, fn 0 -> 2/3. Best 0.7; every threshold in (0.6, 0.7] predicts the same: 0.65.
  ThresholdMetrics best = tune_threshold_for_f1({1, 0, 1, 0}, {0.9, 0.8, 0.7, 0.6});
  CHECK(best.threshold == (0.7 + 0.6) / 2);
  CHECK(best.f1 == doctest::Approx(0.8));
  CHECK(best.confusion.true_positive == 2);
  CHECK(best.confusion.false_positive == 1);
  // t=0.9: tp 1, fp 0, fn 1 -> 2/3 and t=0.5: tp 2, fp 2, fn 0 -> 2/3: a tie, the higher one wins.
  CHECK(tune_threshold_for_f1({1, 0, 0, 1}, {0.9, 0.8, 0.7, 0.5}).threshold == (0.9 + 0.8) / 2);
  // The lowest score wins: no lower score to move towards.
  CHECK(tune_threshold_for_f1({1, 1}, {0.9, 0.4}).threshold == 0.4);
}

TEST_CASE("precision and F1 are 0, not NaN, when nothing is predicted positive") {
  ThresholdMetrics m = metrics_at({1, 0, 1}, {0.1, 0.2, 0.3}, 0.5);
  CHECK(m.precision == 0.0);
  CHECK(m.recall == 0.0);
  CHECK(m.f1 == 0.0);
  CHECK(m.accuracy == doctest::Approx(1.0 / 3.0));
}
