#include "probes/calibration.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "activations/activation_store.h"
#include "common/error.h"
#include "common/files.h"
#include "metrics/intervals.h"
#include "probes/binary_paths.h"
#include "probes/file_scores.h"
#include "probes/probe_catalog.h"
#include "probes/probe_files.h"

namespace probekit::probes {

Json calibrate_layer(const std::string& dir, const std::string& activation_file, double target_fpr) {
  if (!(target_fpr > 0.0 && target_fpr < 1.0)) fail_usage("--target-fpr must be in (0, 1), got {}", target_fpr);
  const LayerFileScores scored = score_layer_file(dir, activation_file, "the calibration data",
                                                  "a multiclass probe has no per-label thresholds to calibrate");
  const ProbeSet& set = scored.set;
  // In fp32, as inference computes the probabilities it compares with the threshold (a double's sigmoid would
  // tell apart scores that inference rounds to one value, 1.0 from a logit of about 17).
  const at::Tensor probabilities = at::sigmoid(scored.logits.to(at::kFloat));
  const std::string index_path = dir + "/" + kProbeIndexFile;
  Json index = read_json_file(index_path);
  Json calibrations = Json::array();
  for (size_t k = 0; k < set.probes().size(); ++k) {
    const metrics::FprThreshold point =
        metrics::threshold_at_fpr(column_scores(probabilities, static_cast<int64_t>(k)), target_fpr);
    Json calibration = {{"threshold", point.threshold}, {"target_fpr", target_fpr}, {"fpr", point.fpr},
                        {"fpr_ci95", {point.ci95.low, point.ci95.high}}, {"examples", point.examples},
                        {"source", activation_file}};
    index.at("probes")[k]["calibration"] = calibration;
    calibrations.push_back({{"label", set.probes()[k].label}, {"calibration", calibration}});
  }
  write_json_file(index_path, index);
  return calibrations;
}

void add_calibration_flags(CLI::App& app, CalibrationOptions& o) {
  app.add_option("--probes-dir", o.probes_dir, "The probes to calibrate (probes.json, or layer_{L}/ folders)")->required();
  app.add_option("--activations", o.activations,
                 "A capture of ordinary data, read as the probes' activations were (a directory or a layer file)")
      ->required();
  app.add_option("--target-fpr", o.target_fpr, "The share of its examples each probe may flag")->capture_default_str();
}

Json calibrate(const CalibrationOptions& options) {
  const ProbeCatalog catalog = find_probes(options.probes_dir);
  Json layers = Json::array();
  for (const auto& [layer, dir] : catalog.layer_dirs) {
    const std::string file = layer_file_of(options.activations, layer, "--activations");
    layers.push_back({{"layer", layer}, {"probes", calibrate_layer(dir, file, options.target_fpr)}});
    spdlog::info("layer {}: {} probes calibrated at {:g} false positives on {}", layer, layers.back()["probes"].size(),
                 options.target_fpr, file);
  }
  return {{"target_fpr", options.target_fpr}, {"layers", layers}};
}

}  // namespace probekit::probes
