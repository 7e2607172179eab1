// patch_activations as a library: its flags, and the run from a loaded model to patching.json and patching.html,
// which the tool and the Python package's model.patch share.
#pragma once

#include <string>
#include <vector>

#include "cli/app_fwd.h"
#include "common/json.h"
#include "loading/model_loading.h"
#include "patching/report.h"

namespace probekit::patching {

/// What patch_activations says when Ctrl-C stops it: its output is staged and moved into place whole.
constexpr const char* kPatchInterruptNote =
    "the output directory is as it was before this run: patching.json and patching.html are written together once "
    "every cell is computed";

/// What to patch, in the flags' terms (a loaded model aside).
struct PatchArguments {
  std::string clean, corrupted;
  std::string corruption = "prompt";  // prompt (--corrupted) | noise (--subject, --noise, --seed)
  NoiseCorruption noise;
  bool noise_given = false;  // --noise or --seed was on the command line (a corrupted prompt refuses them)
  std::string metric = "logit-diff";
  std::vector<std::string> sites = {"resid_post"};
  std::string layers = "all", positions = "all";
  int64_t layer_window = 1;
  std::string direction = "denoise";  // denoise | noise
  std::string method = "exact";       // exact | attribution | both
  int64_t rows_per_batch = 0;
};

struct PatchActivationsOptions {
  loading::ModelRequest model;
  PatchArguments patch;
  std::string output_dir;
  bool overwrite = false;
};

void add_patch_flags(CLI::App& app, PatchActivationsOptions& options);

/// Runs the patching `arguments` ask for on a loaded model (attribution through `graphs` when given: run_patching);
/// returns patching.json.
Json run_patch(const loading::SharedModel& model, const PatchArguments& arguments, readout::StepGraphs* graphs = nullptr);

/// patch_activations: loads the model, runs, writes OUT/patching.json and OUT/patching.html; returns patching.json.
Json run_patch_activations(const PatchActivationsOptions& options);

}  // namespace probekit::patching
