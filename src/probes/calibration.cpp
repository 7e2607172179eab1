#include "probes/calibration.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "activations/activation_store.h"
#include "common/error.h"
#include "common/files.h"
#include "common/progress.h"
#include "common/units.h"
#include "device/torch/row_stable.h"
#include "metrics/intervals.h"
#include "probes/binary_paths.h"
#include "probes/file_scores.h"
#include "probes/probe_catalog.h"
#include "probes/probe_files.h"

namespace probekit::probes {

namespace {

// A layer's probes.json with its probes' calibrations in, not yet written, the calibrations and what the data
// earned in warnings.
struct CalibratedIndex {
  std::string path;
  Json index, calibrations;
  std::vector<std::string> warnings;
};

// What is wrong with data that calibrates without failing: too few examples to tell the rate from zero or from
// twice it, and rows labelled with a probe's own label (the concept itself, counted as false positives).
std::vector<std::string> calibration_warnings(const LayerFileScores& scored, double target_fpr) {
  std::vector<std::string> warnings;
  const int64_t examples = scored.logits.size(0), needed = metrics::examples_to_resolve_rate(target_fpr);
  if (examples < needed) {
    const metrics::Interval interval = metrics::wilson_interval_at(target_fpr, examples);
    warnings.push_back(fmt::format(
        "{}: {} examples cannot resolve a false-positive rate of {:g} (even at exactly that rate, the 95% interval would "
        "be {:.3g} to {:.3g}); about {} examples bring it within twice the rate",
        scored.file.path, examples, target_fpr, interval.low, interval.high, needed));
  }
  const std::vector<std::string>& names = scored.file.attributes.label_names;
  const std::vector<int64_t> labels = file_labels(scored.file);
  for (const auto& probe : scored.set.probes()) {
    const auto name = std::find(names.begin(), names.end(), probe.label);
    if (name == names.end()) continue;
    const int64_t index = name - names.begin();
    const auto rows = std::count(labels.begin(), labels.end(), index);
    if (rows == 0) continue;
    warnings.push_back(fmt::format(
        "{}: {} of its {} examples are labelled '{}', which the probe detects: calibration counts them as false "
        "positives (calibrate on ordinary data without the concept)",
        scored.file.path, rows, examples, probe.label));
  }
  return warnings;
}

Json threshold_record(const metrics::FprThreshold& point) {
  return {{"threshold", point.threshold}, {"fpr", point.fpr}, {"fpr_ci95", {point.ci95.low, point.ci95.high}},
          {"examples", point.examples}};
}

CalibratedIndex calibrated_index(const std::string& dir, const std::string& activation_file, double target_fpr) {
  if (!(target_fpr > 0.0 && target_fpr < 1.0)) fail_usage("--target-fpr must be in (0, 1), got {}", target_fpr);
  const LayerFileScores scored = score_layer_file(dir, activation_file, "the calibration data",
                                                  "a multiclass probe has no per-label thresholds to calibrate", true);
  const ProbeSet& set = scored.set;
  if (!scored.no_token_maxima.empty()) {
    spdlog::info("{}: thresholds for whole texts only, none per token for monitors: {}", dir, scored.no_token_maxima);
  }
  // In fp32, as inference computes the probabilities it compares with the threshold (a double's sigmoid would
  // tell apart scores that inference rounds to one value, 1.0 from a logit of about 17).
  const at::Tensor probabilities = device::row_stable_sigmoid(scored.logits.to(at::kFloat));
  const std::string index_path = dir + "/" + kProbeIndexFile;
  Json index = read_json_file(index_path);
  Json calibrations = Json::array();
  for (size_t k = 0; k < set.probes().size(); ++k) {
    const auto column = static_cast<int64_t>(k);
    Json calibration = threshold_record(metrics::threshold_at_fpr(column_scores(probabilities, column), target_fpr));
    calibration["target_fpr"] = target_fpr;
    calibration["source"] = activation_file;
    // What a monitor compares at every token: each text's highest, so that at most the target share of texts fire.
    if (scored.token_maxima.defined()) {
      calibration["per_token"] =
          threshold_record(metrics::threshold_at_fpr(column_scores(scored.token_maxima, column), target_fpr));
    }
    index.at("probes")[k]["calibration"] = calibration;
    calibrations.push_back({{"label", set.probes()[k].label}, {"calibration", calibration}});
  }
  std::vector<std::string> warnings = calibration_warnings(scored, target_fpr);
  for (const Json& entry : calibrations) {
    const Json& calibration = entry["calibration"];
    const Json* per_token = calibration.contains("per_token") ? &calibration.at("per_token") : nullptr;
    for (const auto& [record, what] : {std::pair{&calibration, "texts"}, std::pair{per_token, "texts' highest tokens"}}) {
      if (record == nullptr || !(record->at("threshold").get<double>() > 1.0)) continue;
      warnings.push_back(fmt::format(
          "{}: probe '{}' scores 1.0 on more than {:g} of the calibration {} (its probability saturates, from a "
          "logit of about 17): only a threshold above 1.0 keeps to the rate, and the probe never fires at it (train "
          "with a smaller --C, or calibrate on other ordinary data)",
          activation_file, entry["label"].get<std::string>(), target_fpr, what));
    }
  }
  for (const std::string& warning : warnings) spdlog::warn("{}", warning);
  return {index_path, std::move(index), std::move(calibrations), std::move(warnings)};
}

// A calibration is an output like any other: replaced only with --overwrite, naming what it would replace.
void refuse_calibrated(const std::string& dir) {
  const std::string path = dir + "/" + kProbeIndexFile;
  const Json index = read_json_file(path);
  const Json probes = index.is_object() ? index.value("probes", Json::array()) : Json::array();
  if (!probes.is_array()) return;  // the probes' loading names what is wrong with it
  for (const Json& probe : probes) {
    if (!probe.is_object() || !probe.contains("calibration") || !probe["calibration"].is_object()) continue;
    const Json& calibration = probe["calibration"];
    fail_usage("{}: the probes are calibrated already (at a false-positive rate of {} on {}); pass --overwrite to "
               "replace the calibrations",
               path, dump_json(calibration.value("target_fpr", Json())), dump_json(calibration.value("source", Json())));
  }
}

}  // namespace

Json calibrate_layer(const std::string& dir, const std::string& activation_file, double target_fpr) {
  CalibratedIndex calibrated = calibrated_index(dir, activation_file, target_fpr);
  write_json_file(calibrated.path, calibrated.index);
  return calibrated.calibrations;
}

CLI::Option* add_target_fpr_option(CLI::App& app, double& target_fpr, const std::string& help) {
  return app.add_option("--target-fpr", target_fpr, help)
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            const std::optional<double> rate = parse_number(text);
            return rate && *rate > 0 && *rate < 1 ? "" : "must be a number in (0, 1)";
          },
          "in (0, 1)"))
      ->capture_default_str();
}

void add_calibration_flags(CLI::App& app, CalibrationOptions& o) {
  app.add_option("--probes-dir", o.probes_dir, "The probes to calibrate (probes.json, or layer_{L}/ folders)")->required();
  app.add_option("--activations", o.activations,
                 "A capture of ordinary data, read as the probes' activations were (a directory or a layer file)")
      ->required();
  add_target_fpr_option(app, o.target_fpr, "The share of its examples each probe may flag");
  app.add_flag("--json", o.json, "Print the calibrations and warnings as JSON on stdout");
  app.add_flag("--overwrite", o.overwrite, "Replace the calibrations probes.json already holds");
}

Json calibrate(const CalibrationOptions& options) {
  const ProbeCatalog catalog = find_probes(options.probes_dir);
  // Every layer is calibrated before any probes.json is written: a failing layer leaves none half-calibrated.
  // Every layer's data is found first: a user told to pass --overwrite should not be told next that it is missing.
  std::map<int64_t, std::string> files;
  for (const auto& [layer, dir] : catalog.layer_dirs) files[layer] = layer_file_of(options.activations, layer, "--activations");
  if (!options.overwrite) {
    for (const auto& [layer, dir] : catalog.layer_dirs) refuse_calibrated(dir);
  }
  std::vector<CalibratedIndex> calibrated;
  Json layers = Json::array();
  ProgressBar progress("calibrating", static_cast<int64_t>(catalog.layer_dirs.size()), "layers");
  for (const auto& [layer, dir] : catalog.layer_dirs) {
    const std::string& file = files.at(layer);
    calibrated.push_back(calibrated_index(dir, file, options.target_fpr));
    const CalibratedIndex& last = calibrated.back();
    layers.push_back({{"layer", layer}, {"probes", last.calibrations}, {"warnings", last.warnings}});
    spdlog::info("layer {}: {} probes calibrated at {:g} false positives on {}", layer, layers.back()["probes"].size(),
                 options.target_fpr, file);
    progress.update(static_cast<int64_t>(layers.size()));
  }
  progress.finish();
  for (const CalibratedIndex& c : calibrated) write_json_file(c.path, c.index);
  return {{"target_fpr", options.target_fpr}, {"layers", layers}};
}

}  // namespace probekit::probes
