// steering_sweep as a library: causal validation of probes. For each label and coefficient, generate from every
// prompt with the label's probe direction added at one layer, and measure (a) that label's probe score over the
// generated tokens, (b) every other label's shift (selectivity), (c) the fluency cost: the KL divergence of each
// step's next-token distribution from the unsteered model's on the same text, and the steered text's perplexity
// under the unsteered model. Every cell of a batch steers differently, so the whole sweep runs as batched
// generations with a steering vector per row, not one run per cell.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/app_fwd.h"
#include "common/json.h"
#include "generation/flags.h"
#include "inference/engine.h"

namespace probekit::sweep {

struct SweepOptions {
  inference::EngineOptions engine;  // the model and the probes (their layer: --layer)
  std::optional<std::string> labels;  // comma-separated; none: every label with a probe at the layer (given empty: refused)
  std::vector<double> coefficients = {-8, -4, 0, 4, 8};
  std::string prompts_file;         // one prompt per line
  generation::GenerationFlags generation = {[] {
    generation::GenerationOptions options;
    options.max_new_tokens = 48;
    return options;
  }()};
  int64_t rows_per_batch = 64;      // generations (label x coefficient x prompt) decoded together
  std::string output_dir;
  bool overwrite = false;
  bool resume = false;  // go on from the generations an interrupted run kept (sweep_progress.h)
};

void add_sweep_flags(CLI::App& app, SweepOptions& options);

/// Runs the sweep and writes output_dir/sweep.json (every number) and output_dir/sweep.html; returns the summary
/// (one entry per label and coefficient) with the run's cells per second.
Json run_sweep(SweepOptions options);

/// What steering_sweep says when Ctrl-C stops it (after the count of generations kept).
constexpr const char* kSweepInterruptNote =
    "the output directory is as it was before this run; sweep.json and sweep.html are written once every cell is "
    "generated";

}  // namespace probekit::sweep
