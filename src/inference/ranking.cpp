#include "inference/ranking.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace probekit::inference {

Aggregate parse_aggregate(const std::string& name) {
  if (name == "max") return Aggregate::kMax;
  if (name == "mean") return Aggregate::kMean;
  fail_usage("--aggregate {}: expected max or mean", name);
}

std::vector<Prediction> all_predictions(const ScoreTable& table) {
  std::vector<Prediction> out;
  for (size_t l = 0; l < table.layers.size(); ++l) {
    for (size_t k = 0; k < table.labels.size(); ++k) {
      double p = table.probability[l][k];
      if (std::isnan(p)) continue;
      out.push_back(Prediction{table.labels[k], table.layers[l], p, p >= table.threshold[l][k], table.auc[l][k]});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) { return a.confidence > b.confidence; });
  return out;
}

std::vector<Prediction> top_predictions(const ScoreTable& table, int64_t top_k) {
  std::vector<Prediction> ranked = all_predictions(table);
  ranked.resize(std::min<size_t>(ranked.size(), static_cast<size_t>(top_k)));
  return ranked;
}

std::vector<Prediction> shown_predictions(const std::vector<Prediction>& ranked, int64_t top_k) {
  std::vector<Prediction> first(ranked.begin(), ranked.begin() + std::min<std::ptrdiff_t>(top_k, static_cast<std::ptrdiff_t>(ranked.size())));
  std::vector<Prediction> active;
  for (const Prediction& p : first) {
    if (p.active) active.push_back(p);
  }
  return active.empty() ? first : active;
}

std::vector<LabelSummary> by_label(const ScoreTable& table, Aggregate aggregate) {
  std::vector<LabelSummary> out;
  for (size_t k = 0; k < table.labels.size(); ++k) {
    LabelSummary s;
    s.label = table.labels[k];
    double sum = 0, best = -1;
    double best_threshold = 0.5;
    for (size_t l = 0; l < table.layers.size(); ++l) {
      double p = table.probability[l][k];
      if (std::isnan(p)) continue;
      s.by_layer.emplace_back(table.layers[l], p);
      sum += p;
      if (p > best) {
        best = p;
        s.best_layer = table.layers[l];
        best_threshold = table.threshold[l][k];
      }
    }
    if (s.by_layer.empty()) continue;
    std::stable_sort(s.by_layer.begin(), s.by_layer.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    s.aggregate = aggregate == Aggregate::kMax ? best : sum / static_cast<double>(s.by_layer.size());
    s.active = s.aggregate >= best_threshold;
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(), [](const LabelSummary& a, const LabelSummary& b) { return a.aggregate > b.aggregate; });
  return out;
}

std::vector<LayerGroup> by_layer(const ScoreTable& table) {
  std::vector<LayerGroup> out;
  for (size_t l = 0; l < table.layers.size(); ++l) {
    ScoreTable one = table;
    one.layers = {table.layers[l]};
    one.probability = {table.probability[l]};
    one.threshold = {table.threshold[l]};
    one.auc = {table.auc[l]};
    LayerGroup group;
    group.layer = table.layers[l];
    group.predictions = all_predictions(one);
    for (const Prediction& p : group.predictions) group.active += p.active ? 1 : 0;
    out.push_back(std::move(group));
  }
  return out;
}

std::vector<Difference> compare_tables(const ScoreTable& first, const ScoreTable& second, Aggregate aggregate) {
  std::vector<LabelSummary> a = by_label(first, aggregate), b = by_label(second, aggregate);
  std::vector<Difference> out;
  for (const std::string& label : first.labels) {
    auto find = [&](const std::vector<LabelSummary>& summaries) {
      return std::find_if(summaries.begin(), summaries.end(), [&](const LabelSummary& s) { return s.label == label; });
    };
    auto in_a = find(a), in_b = find(b);
    Difference d;
    d.label = label;
    d.first = in_a == a.end() ? 0.0 : in_a->aggregate;
    d.second = in_b == b.end() ? 0.0 : in_b->aggregate;
    d.first_layer = in_a == a.end() ? -1 : in_a->best_layer;
    d.second_layer = in_b == b.end() ? -1 : in_b->best_layer;
    d.difference = d.second - d.first;
    out.push_back(d);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Difference& x, const Difference& y) { return std::fabs(x.difference) > std::fabs(y.difference); });
  return out;
}

}  // namespace probekit::inference
