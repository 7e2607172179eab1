// Thresholds at a target false-positive rate on ordinary data: at most floor(rate * n) scores flagged (score >=
// threshold), the threshold placed between the lowest flagged and the next score, ties never split.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "metrics/intervals.h"

using namespace probekit::metrics;

TEST_CASE("threshold_at_fpr flags at most the target share, between the lowest flagged score and the next") {
  std::vector<double> scores;
  for (int i = 1; i <= 200; ++i) scores.push_back(i / 200.0);
  FprThreshold point = threshold_at_fpr(scores, 0.01);
  CHECK(point.flagged == 2);
  CHECK(point.examples == 200);
  CHECK(point.fpr == doctest::Approx(0.01));
  CHECK(point.threshold == doctest::Approx((199.0 + 198.0) / 400.0));
  int64_t flagged = 0;
  for (double s : scores) flagged += s >= point.threshold ? 1 : 0;
  CHECK(flagged == 2);
  CHECK(point.ci95.low <= 0.01);
  CHECK(point.ci95.high >= 0.01);

  // Fewer than 1/rate examples: nothing may be flagged, the threshold sits just above the highest score.
  point = threshold_at_fpr({0.2, 0.9, 0.4}, 0.01);
  CHECK(point.flagged == 0);
  CHECK(point.threshold > 0.9);
  CHECK(point.threshold < 0.9 + 1e-6);  // a step of fp32 above it, as inference compares fp32 probabilities
  // Ties at the top are flagged together or not at all.
  point = threshold_at_fpr({0.9, 0.9, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}, 0.1);
  CHECK(point.flagged == 0);
  point = threshold_at_fpr({0.9, 0.9, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}, 0.2);
  CHECK(point.flagged == 2);
  CHECK(point.threshold == doctest::Approx(0.85));
  CHECK_THROWS_WITH(threshold_at_fpr({}, 0.01), doctest::Contains("no examples"));
  CHECK_THROWS_WITH(threshold_at_fpr({0.5}, 1.5), doctest::Contains("outside [0, 1]"));
}

TEST_CASE("wilson_interval: the 95% score interval of a proportion") {
  Interval none = wilson_interval(0, 100);
  CHECK(none.low == doctest::Approx(0.0));
  CHECK(none.high == doctest::Approx(0.036994).epsilon(1e-4));
  Interval half = wilson_interval(50, 100);
  CHECK(half.low == doctest::Approx(0.403832).epsilon(1e-4));
  CHECK(half.high == doctest::Approx(0.596168).epsilon(1e-4));
  CHECK(std::isnan(wilson_interval(0, 0).low));
  // Regression: none of 12 flagged gave a lower bound of 2.8e-17, not 0; all of them an upper bound below 1.
  for (const int64_t n : {int64_t{1}, int64_t{12}, int64_t{200}, int64_t{753}}) {
    CHECK(wilson_interval(0, n).low == 0.0);
    CHECK(wilson_interval(n, n).high == 1.0);
  }
}

TEST_CASE("examples_to_resolve_rate: the fewest examples whose interval at the rate reaches at most twice it") {
  // Found by stepping n one at a time in Python over the same interval.
  CHECK(examples_to_resolve_rate(0.01) == 753);
  CHECK(examples_to_resolve_rate(0.05) == 139);
  CHECK(examples_to_resolve_rate(0.1) == 62);
  CHECK(examples_to_resolve_rate(0.001) == 7668);
  CHECK(examples_to_resolve_rate(1e-6) == 7682903);
  CHECK(examples_to_resolve_rate(0.6) == 1);
  CHECK(examples_to_resolve_rate(1e-300) >= int64_t{1} << 50);  // no data resolves it: the search stops
  // Every larger count resolves it too (regression: counting flagged examples rounded down, 581 passed at 1% while
  // most of 600 to 717 did not, and a calibration of 650 examples got no warning).
  for (int64_t n = 753; n < 3000; ++n) REQUIRE(wilson_interval_at(0.01, n).high <= 0.02);
  CHECK(wilson_interval_at(0.01, 752).high > 0.02);
  CHECK(wilson_interval_at(0.05, 20).low == doctest::Approx(wilson_interval(1, 20).low));
}
