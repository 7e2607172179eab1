// Thresholds at a target false-positive rate: a monitor is judged by how rarely it flags ordinary data, so its
// threshold is set on a capture of such data (benign chats, read with the probes' own recipe) at the score that flags
// at most --target-fpr (default 1%) of it. Each binary probe of a layer's directory gets a "calibration" in
// probes.json: {threshold, target_fpr, fpr, fpr_ci95, examples, source}; --calibrated and monitors then use it in
// place of the validation-tuned threshold.
#pragma once

#include <string>
#include <vector>

#include "cli/app_fwd.h"
#include "common/json.h"

namespace probekit::probes {

struct CalibrationOptions {
  std::string probes_dir;    // probes.json, or layer_{L}/ folders
  std::string activations;   // the ordinary data's capture: a directory of layer files, or one file
  double target_fpr = 0.01;
  bool json = false;         // --json: the summary on stdout in place of a line per probe
  bool overwrite = false;    // --overwrite: replace calibrations already in probes.json
};

/// Calibrates the binary probes of one layer's directory `dir` on `activation_file` (every split's examples):
/// writes each probe's calibration into `dir`/probes.json and returns them. A file read otherwise than the probes'
/// activations is refused naming the field, as is a multiclass probe.
Json calibrate_layer(const std::string& dir, const std::string& activation_file, double target_fpr);

/// --target-fpr, refused (a usage error) outside (0, 1) as it is parsed.
CLI::Option* add_target_fpr_option(CLI::App& app, double& target_fpr, const std::string& help);

/// calibrate_probes' flags.
void add_calibration_flags(CLI::App& app, CalibrationOptions& options);

/// Calibrates every layer of `options.probes_dir` on the layer file of the same number in `options.activations`
/// (a layer without one is an error naming it; probes calibrated already are refused without `overwrite`); returns {"target_fpr", "layers": [{layer, probes: [...], warnings}]},
/// the warnings each layer's data earned (too few examples for the rate, rows of a probe's own label) also logged.
Json calibrate(const CalibrationOptions& options);

}  // namespace probekit::probes
