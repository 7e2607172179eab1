// Ranking probe scores the ways the reference's inference engines do: one layer's labels (multi_probe_
// inference), every (label, layer) pair (the universal engine's "all"), labels aggregated over layers
// ("by-action"), labels per layer ("by-layer"), and the biggest differences between two texts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace probekit::inference {

/// Probabilities of one text with the thresholds that mark a probe active; [l][k] for layers[l], labels[k].
struct ScoreTable {
  std::vector<int64_t> layers;
  std::vector<std::string> labels;
  std::vector<std::vector<double>> probability;  // NaN where a label has no probe at a layer
  std::vector<std::vector<double>> threshold;    // the mark's threshold of each probe
  std::vector<std::vector<double>> auc;          // validation AUROC of each probe
  std::string threshold_source;  // with probes' own thresholds: which (Engine::threshold_source); empty otherwise
};

struct Prediction {
  std::string label;
  int64_t layer = 0;
  double confidence = 0;
  bool active = false;
  double auc = 0;
};

enum class Aggregate { kMax, kMean };
Aggregate parse_aggregate(const std::string& name);

/// Every (label, layer) prediction, most confident first (ties keep layer-then-label order).
std::vector<Prediction> all_predictions(const ScoreTable& table);
/// The first `top_k` of all_predictions.
std::vector<Prediction> top_predictions(const ScoreTable& table, int64_t top_k);

/// The reference's choice of what to show: of the first top_k, those that are active; if none is, the first
/// top_k anyway.
std::vector<Prediction> shown_predictions(const std::vector<Prediction>& ranked, int64_t top_k);

struct LabelSummary {
  std::string label;
  double aggregate = 0;
  int64_t best_layer = 0;                             // layer of the highest confidence
  std::vector<std::pair<int64_t, double>> by_layer;   // (layer, confidence), most confident first
  bool active = false;
};

/// One entry per label, confidences aggregated over layers, highest aggregate first.
std::vector<LabelSummary> by_label(const ScoreTable& table, Aggregate aggregate);

struct LayerGroup {
  int64_t layer = 0;
  std::vector<Prediction> predictions;  // most confident first
  int64_t active = 0;
};

/// Predictions grouped per layer, layers in ascending order.
std::vector<LayerGroup> by_layer(const ScoreTable& table);

struct Difference {
  std::string label;
  double first = 0, second = 0, difference = 0;  // difference = second - first
  int64_t first_layer = 0, second_layer = 0;
};

/// Per label (aggregated over layers), the change from text one to text two, biggest absolute change first.
std::vector<Difference> compare_tables(const ScoreTable& first, const ScoreTable& second, Aggregate aggregate);

}  // namespace probekit::inference
