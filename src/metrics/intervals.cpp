#include "metrics/intervals.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/counter_random.h"
#include "common/error.h"

namespace probekit::metrics {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Keeps the bootstrap's stream apart from any other use of the same seed.
constexpr uint64_t kBootstrapStream = 0xB0075724ull;

}  // namespace

RankedExamples::RankedExamples(const std::vector<int>& labels, const std::vector<double>& scores) {
  if (labels.size() != scores.size()) fail_input("metrics: {} labels but {} scores", labels.size(), scores.size());
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  group_of_.resize(scores.size());
  positive_.resize(scores.size());
  for (size_t i = 0; i < order.size(); ++i) {
    size_t example = order[i];
    if (i == 0 || scores[example] != group_scores_.back()) group_scores_.push_back(scores[example]);
    group_of_[example] = static_cast<uint32_t>(group_scores_.size() - 1);
    positive_[example] = labels[example] != 0 ? 1 : 0;
  }
}

GroupCounts RankedExamples::count(const std::vector<uint32_t>& counts) const {
  if (!counts.empty() && counts.size() != group_of_.size()) {
    fail_input("metrics: {} resample counts for {} examples", counts.size(), group_of_.size());
  }
  GroupCounts c;
  c.positives.assign(group_scores_.size(), 0);
  c.negatives.assign(group_scores_.size(), 0);
  for (size_t i = 0; i < group_of_.size(); ++i) {
    int64_t times = counts.empty() ? 1 : counts[i];
    (positive_[i] ? c.positives : c.negatives)[group_of_[i]] += times;
    (positive_[i] ? c.total_positives : c.total_negatives) += times;
  }
  return c;
}

namespace {

// A threshold (predictions: score >= threshold) accepting the first `accepted` groups of the descending
// `scores`: the middle between the lowest accepted and the next, the lowest score when all are, just above the
// highest when none is: by a step of fp32, whose probabilities inference compares (a double's step let the highest
// score, recomputed in fp32 and rounded up, pass). Two neighbouring doubles have no middle, which rounds to one of
// them: the lowest accepted score then (regression: the middle rounded down to the first rejected score).
double threshold_accepting(const std::vector<double>& scores, size_t accepted) {
  if (accepted == 0) {
    const float above = std::nextafter(static_cast<float>(scores.front()), std::numeric_limits<float>::infinity());
    return std::max(static_cast<double>(above), std::nextafter(scores.front(), std::numeric_limits<double>::infinity()));
  }
  if (accepted == scores.size()) return scores.back();
  const double middle = (scores[accepted - 1] + scores[accepted]) / 2.0;
  return middle > scores[accepted] ? middle : scores[accepted - 1];
}

}  // namespace

RecallAtFpr recall_at_fpr(const RankedExamples& ranked, const GroupCounts& counts, double max_fpr) {
  if (!(max_fpr >= 0.0 && max_fpr <= 1.0)) fail_input("metrics: false-positive rate {} is outside [0, 1]", max_fpr);
  RecallAtFpr point;
  point.max_fpr = max_fpr;
  if (counts.total_positives == 0 || counts.total_negatives == 0) return point;
  const auto allowed = static_cast<int64_t>(std::floor(max_fpr * static_cast<double>(counts.total_negatives) + 1e-9));
  const std::vector<double>& scores = ranked.group_scores();
  int64_t false_positives = 0, true_positives = 0;
  size_t accepted = 0;  // groups predicted positive, from the top
  for (size_t g = 0; g < scores.size(); ++g) {
    false_positives += counts.negatives[g];
    if (false_positives > allowed) break;
    true_positives += counts.positives[g];
    accepted = g + 1;
  }
  point.value = static_cast<double>(true_positives) / static_cast<double>(counts.total_positives);
  point.threshold = threshold_accepting(scores, accepted);
  return point;
}

FprThreshold threshold_at_fpr(const std::vector<double>& scores, double max_fpr) {
  if (!(max_fpr >= 0.0 && max_fpr <= 1.0)) fail_input("false-positive rate {} is outside [0, 1]", max_fpr);
  if (scores.empty()) fail_input("no examples to set a threshold on");
  const auto nan = std::find_if(scores.begin(), scores.end(), [](double s) { return std::isnan(s); });
  if (nan != scores.end()) fail_input("score {} is NaN: no threshold can be set on it", nan - scores.begin());
  RankedExamples ranked(std::vector<int>(scores.size(), 0), scores);
  const GroupCounts counts = ranked.count();
  const auto n = static_cast<int64_t>(scores.size());
  const auto allowed = static_cast<int64_t>(std::floor(max_fpr * static_cast<double>(n) + 1e-9));
  FprThreshold out;
  out.examples = n;
  size_t accepted = 0;
  for (size_t g = 0; g < counts.negatives.size() && out.flagged + counts.negatives[g] <= allowed; ++g) {
    out.flagged += counts.negatives[g];
    accepted = g + 1;
  }
  out.threshold = threshold_accepting(ranked.group_scores(), accepted);
  out.fpr = static_cast<double>(out.flagged) / static_cast<double>(n);
  out.ci95 = wilson_interval(out.flagged, n);
  return out;
}

Interval wilson_interval(int64_t successes, int64_t trials) {
  if (trials <= 0) return {};
  return wilson_interval_at(static_cast<double>(successes) / static_cast<double>(trials), trials);
}

Interval wilson_interval_at(double proportion, int64_t trials) {
  if (trials <= 0) return {};
  constexpr double z = 1.959963984540054;
  const double n = static_cast<double>(trials), p = proportion;
  const double centre = (p + z * z / (2 * n)) / (1 + z * z / n);
  const double half = z / (1 + z * z / n) * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n));
  // At p = 0 (or 1) the bound is 0 (or 1) exactly; centre - half rounds to a few ulps beside it.
  const double low = p <= 0 ? 0.0 : std::max(0.0, centre - half);
  const double high = p >= 1 ? 1.0 : std::min(1.0, centre + half);
  return {low, high};
}

int64_t examples_to_resolve_rate(double rate) {
  // The interval at a fixed proportion narrows as the trials grow: the first count that resolves it is found by
  // doubling, then halving the gap. A rate too small for any data stops at 2^50 examples.
  const auto resolved = [rate](int64_t n) { return wilson_interval_at(rate, n).high <= 2 * rate; };
  constexpr int64_t kMostExamples = int64_t{1} << 50;
  int64_t high = 1;
  while (!resolved(high) && high < kMostExamples) high *= 2;
  int64_t low = high / 2;  // not resolved (or 0)
  while (high - low > 1) {
    const int64_t middle = low + (high - low) / 2;
    (resolved(middle) ? high : low) = middle;
  }
  return high;
}

RecallAtFpr recall_at_fpr(const std::vector<int>& labels, const std::vector<double>& scores, double max_fpr) {
  RankedExamples ranked(labels, scores);
  return recall_at_fpr(ranked, ranked.count(), max_fpr);
}

double roc_auc(const GroupCounts& counts) {
  if (counts.total_positives == 0 || counts.total_negatives == 0) return kNaN;
  // Twice the area in units of one (negative, positive) pair, in integers as metrics::roc_auc.
  int64_t doubled_area = 0, true_positives = 0;
  for (size_t g = 0; g < counts.positives.size(); ++g) {
    doubled_area += counts.negatives[g] * (2 * true_positives + counts.positives[g]);
    true_positives += counts.positives[g];
  }
  return static_cast<double>(doubled_area) /
         (2.0 * static_cast<double>(counts.total_positives) * static_cast<double>(counts.total_negatives));
}

double f1_at(const RankedExamples& ranked, const GroupCounts& counts, double threshold) {
  int64_t true_positives = 0, false_positives = 0;
  const std::vector<double>& scores = ranked.group_scores();
  for (size_t g = 0; g < scores.size() && scores[g] >= threshold; ++g) {
    true_positives += counts.positives[g];
    false_positives += counts.negatives[g];
  }
  int64_t false_negatives = counts.total_positives - true_positives;
  int64_t denominator = 2 * true_positives + false_positives + false_negatives;
  return denominator == 0 ? 0.0 : 2.0 * static_cast<double>(true_positives) / static_cast<double>(denominator);
}

Bootstrap::Bootstrap(int64_t examples, int64_t resamples, uint64_t seed)
    : examples_(examples), resamples_(resamples), key_(mix64(mix64(seed) ^ kBootstrapStream)) {
  if (examples < 0 || resamples < 0) fail_input("bootstrap: {} examples and {} resamples", examples, resamples);
}

void Bootstrap::draw(int64_t r, std::vector<uint32_t>& counts) const {
  counts.assign(static_cast<size_t>(examples_), 0);
  uint64_t resample_key = draw_bits(key_, static_cast<uint64_t>(r));
  for (int64_t i = 0; i < examples_; ++i) {
    ++counts[draw_below(resample_key, static_cast<uint64_t>(i), static_cast<uint64_t>(examples_))];
  }
}

Interval percentile_interval(std::vector<double> values, double confidence) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }), values.end());
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  auto at = [&](double quantile) {
    double position = quantile * static_cast<double>(values.size() - 1);
    auto below = static_cast<size_t>(std::floor(position));
    size_t above = std::min(below + 1, values.size() - 1);
    return values[below] + (position - static_cast<double>(below)) * (values[above] - values[below]);
  };
  double tail = (1.0 - confidence) / 2.0;
  return {at(tail), at(1.0 - tail)};
}

std::vector<TestFigures> test_figures(const std::vector<std::vector<int>>& labels,
                                      const std::vector<std::vector<double>>& scores,
                                      const std::vector<double>& thresholds, const IntervalOptions& options) {
  size_t probes = labels.size();
  if (scores.size() != probes || thresholds.size() != probes) {
    fail_input("metrics: {} label columns, {} score columns and {} thresholds", probes, scores.size(), thresholds.size());
  }
  std::vector<RankedExamples> ranked;
  std::vector<TestFigures> figures(probes);
  for (size_t p = 0; p < probes; ++p) {
    ranked.emplace_back(labels[p], scores[p]);
    if (ranked[p].examples() != ranked[0].examples()) fail_input("metrics: probes scored on different test splits");
    GroupCounts all = ranked[p].count();
    for (double fpr : options.fprs) figures[p].recall_at_fpr.push_back(recall_at_fpr(ranked[p], all, fpr));
  }
  if (probes == 0) return figures;
  // [probe][statistic][resample]: AUROC, F1, then the recall at each rate.
  size_t statistics = 2 + options.fprs.size();
  std::vector<std::vector<std::vector<double>>> samples(
      probes, std::vector<std::vector<double>>(statistics, std::vector<double>(static_cast<size_t>(options.resamples))));
  Bootstrap bootstrap(static_cast<int64_t>(ranked[0].examples()), options.resamples, options.seed);
  // Each resample is drawn from its own key and fills its own slots: the threads share nothing.
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < options.resamples; ++r) {
    std::vector<uint32_t> counts;
    bootstrap.draw(r, counts);
    for (size_t p = 0; p < probes; ++p) {
      GroupCounts resampled = ranked[p].count(counts);
      samples[p][0][r] = roc_auc(resampled);
      samples[p][1][r] = f1_at(ranked[p], resampled, thresholds[p]);
      for (size_t f = 0; f < options.fprs.size(); ++f) {
        samples[p][2 + f][r] = recall_at_fpr(ranked[p], resampled, options.fprs[f]).value;
      }
    }
  }
  for (size_t p = 0; p < probes; ++p) {
    figures[p].auc_roc_ci95 = percentile_interval(std::move(samples[p][0]));
    figures[p].f1_ci95 = percentile_interval(std::move(samples[p][1]));
    for (size_t f = 0; f < options.fprs.size(); ++f) {
      figures[p].recall_at_fpr[f].ci95 = percentile_interval(std::move(samples[p][2 + f]));
    }
  }
  return figures;
}

}  // namespace probekit::metrics
