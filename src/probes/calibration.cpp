#include "probes/calibration.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "activations/activation_store.h"
#include "common/error.h"
#include "common/files.h"
#include "metrics/intervals.h"
#include "probes/probe_catalog.h"
#include "probes/probe_files.h"

namespace probekit::probes {

namespace {

// The probabilities [examples, K] of every example of every split of `file` under `set`.
at::Tensor file_probabilities(const ProbeSet& set, const activations::ActivationFile& file) {
  std::vector<at::Tensor> parts;
  for (const activations::SplitData& split : file.splits) {
    if (split.examples() == 0) continue;
    at::Tensor rows = at::from_blob(const_cast<float*>(split.activations.data()), {split.rows, split.hidden}, at::kFloat);
    if (set.shape().kind->reads_every_token()) {
      if (split.offsets.empty()) fail_input("{}: {} probes read every token: calibrate on a --position all capture", file.path, set.shape().kind->name());
      parts.push_back(at::sigmoid(set.token_logits(rows, split.offsets).to(at::kFloat)));
    } else {
      if (!split.offsets.empty()) fail_input("{}: per-token rows; these probes read one row per example", file.path);
      parts.push_back(set.probabilities(rows));
    }
  }
  if (parts.empty()) fail_input("{}: no examples to calibrate on", file.path);
  return at::cat(parts).to(at::kDouble).contiguous();
}

}  // namespace

Json calibrate_layer(const std::string& dir, const std::string& activation_file, double target_fpr) {
  if (!(target_fpr > 0.0 && target_fpr < 1.0)) fail_usage("--target-fpr must be in (0, 1), got {}", target_fpr);
  const ProbeSet set = ProbeSet::load(dir, at::kCPU, at::kFloat);
  if (set.multiclass()) fail_input("{}: a multiclass probe has no per-label thresholds to calibrate", dir);
  const activations::ActivationFile file = activations::read_activation_file(activation_file);
  const std::string difference =
      activations::recipe_difference(set.recipe(), file.attributes.recipe, "the probes' activations", activation_file);
  if (!difference.empty()) {
    fail_input("{}: the calibration data was read otherwise than the probes' activations ({}); capture it with the "
               "probes' recipe",
               dir, difference);
  }
  const at::Tensor probabilities = file_probabilities(set, file);
  const std::string index_path = dir + "/" + kProbeIndexFile;
  Json index = read_json_file(index_path);
  Json calibrations = Json::array();
  for (size_t k = 0; k < set.probes().size(); ++k) {
    at::Tensor column = probabilities.select(1, static_cast<int64_t>(k)).contiguous();
    const metrics::FprThreshold point = metrics::threshold_at_fpr(
        std::vector<double>(column.data_ptr<double>(), column.data_ptr<double>() + column.numel()), target_fpr);
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
  std::map<int64_t, std::string> files;
  for (const std::string& path : activations::find_activation_files({options.activations})) {
    files[activations::read_attributes(path).layer] = path;
  }
  Json layers = Json::array();
  for (const auto& [layer, dir] : catalog.layer_dirs) {
    auto found = files.find(layer);
    if (found == files.end()) {
      fail_input("{}: no layer {} file to calibrate the probes of {} on", options.activations, layer, dir);
    }
    layers.push_back({{"layer", layer}, {"probes", calibrate_layer(dir, found->second, options.target_fpr)}});
    spdlog::info("layer {}: {} probes calibrated at {:g} false positives on {}", layer, layers.back()["probes"].size(),
                 options.target_fpr, found->second);
  }
  return {{"target_fpr", options.target_fpr}, {"layers", layers}};
}

}  // namespace probekit::probes
