#include "probes/run_summary.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

namespace probekit::probes {
namespace {

// A figure of four decimals, or "-" where it is undefined (a label with one class in its test split has no AUROC).
bool defined(const Json& value) { return value.is_number() && std::isfinite(value.get<double>()); }
std::string figure(const Json& value) { return defined(value) ? fmt::format("{:.4f}", value.get<double>()) : "-"; }

std::string layer_table(const Json& layers) {
  std::string out = "  layer  probes  test AUROC  F1 at 0.5  F1 tuned  skipped  seconds\n";
  for (const Json& layer : layers) {
    out += fmt::format("  {:>5}  {:>6}  {:>10}  {:>9}  {:>8}  {:>7}  {:>7.1f}\n", layer.at("layer").get<int64_t>(),
                       layer.at("probes").get<int64_t>(), figure(layer.at("mean_test_auc_roc")),
                       figure(layer.at("mean_test_f1")), figure(layer.at("mean_test_f1_tuned")),
                       layer.at("skipped_labels").size(), layer.at("seconds").get<double>());
  }
  return out;
}

// The layer of the highest mean test AUROC, where there are layers to choose from.
std::string best_layer_line(const Json& layers) {
  const Json* best = nullptr;
  for (const Json& layer : layers) {
    const Json& auc = layer.at("mean_test_auc_roc");
    if (defined(auc) && (best == nullptr || auc.get<double>() > best->at("mean_test_auc_roc").get<double>())) {
      best = &layer;
    }
  }
  if (best == nullptr || layers.size() < 2) return "";
  return fmt::format("  best layer by mean test AUROC: {} ({})\n", best->at("layer").get<int64_t>(),
                     figure(best->at("mean_test_auc_roc")));
}

// The log names them; stdout says how many, once for the run.
std::string without_examples_line(const Json& layers) {
  std::set<std::string> labels;
  for (const Json& layer : layers) {
    for (const Json& label : layer.at("labels_without_examples")) labels.insert(label.get<std::string>());
  }
  if (labels.empty()) return "";
  return fmt::format("{} label{} without an example got no probe (aggregate_metrics.json lists them)\n", labels.size(),
                     labels.size() == 1 ? "" : "s");
}

std::string layers_phrase(const Json& layers) {
  if (layers.size() == 1) return fmt::format("layer {}", layers.front().at("layer").get<int64_t>());
  return fmt::format("{} layers", layers.size());
}

std::string compute_phrase(const Json& summary) {
  return fmt::format("{:.1f} s ({}, {})", summary.at("total_seconds").get<double>(),
                     summary.at("device").get<std::string>(), summary.at("dtype").get<std::string>());
}

}  // namespace

std::string binary_summary_text(const Json& summary) {
  const std::string output_dir = summary.at("output_dir").get<std::string>();
  std::string out;
  if (summary.contains("kinds")) {
    const Json& kinds = summary.at("kinds");
    out += fmt::format("Compared {} probe kinds in {} -> {}\n", kinds.size(), compute_phrase(summary), output_dir);
    for (const auto& [name, kind] : kinds.items()) {
      out += fmt::format("{} ({}):\n", name, kind.at("directory").get<std::string>());
      out += layer_table(kind.at("layers")) + best_layer_line(kind.at("layers"));
    }
    out += without_examples_line(kinds.begin()->at("layers"));
    out += fmt::format("Comparison: {}\n", summary.at("comparison").get<std::string>());
  } else {
    const Json& layers = summary.at("layers");
    out += fmt::format("Trained probes at {} in {} -> {}\n", layers_phrase(layers), compute_phrase(summary),
                       output_dir);
    out += layer_table(layers) + best_layer_line(layers) + without_examples_line(layers);
  }
  out += fmt::format("Report: {}\n", summary.at("report").get<std::string>());
  return out;
}

std::string multiclass_summary_text(const Json& summary) {
  return fmt::format(
      "Trained a {}-class probe at layer {} in {:.1f} s ({}, {}) -> {}\n"
      "  test accuracy {}, macro F1 {}, micro F1 {}, top-3 accuracy {}\n"
      "  best epoch {} (validation accuracy {})\n",
      summary.at("classes").get<int64_t>(), summary.at("layer").get<int64_t>(), summary.at("seconds").get<double>(),
      summary.at("device").get<std::string>(), summary.at("dtype").get<std::string>(),
      summary.at("output_dir").get<std::string>(), figure(summary.at("test_accuracy")),
      figure(summary.at("test_f1_macro")), figure(summary.at("test_f1_micro")),
      figure(summary.at("test_top_3_accuracy")), summary.at("best_epoch").get<int64_t>(),
      figure(summary.at("best_val_accuracy")));
}

}  // namespace probekit::probes
