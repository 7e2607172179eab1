// The command-line flags of the probe trainers and their benchmark, declared once in one table (as llama.cpp's
// common/arg.cpp declares its tools' flags), each entry tagged with the tools that take it and carrying its
// help text. The table holds no defaults: each flag shows in --help the value the tool's options hold when
// the flags are added, which are the trainer's reference defaults (or the benchmark's own).
#pragma once

#include "cli/app_fwd.h"
#include "probes/binary_run.h"
#include "probes/multiclass_trainer.h"

namespace probekit::probes {

/// What the training tools say when Ctrl-C stops them: their output is staged and moved into place whole.
constexpr const char* kTrainingInterruptNote =
    "the output directory is as it was before this run: probes are written all together once every label is trained, "
    "so none of this run's were kept";

/// The tools that take training flags.
enum class TrainingTool {
  kBinary,      // train_binary_probes
  kMulticlass,  // train_probes
  kBench,       // train_probes_bench
};

/// Adds the flags of `tool` (kBinary or kBench) bound to `options`; throws std::invalid_argument for kMulticlass.
void add_training_flags(CLI::App& app, TrainingTool tool, BinaryRunOptions& options);

/// Adds the flags of `tool` (kMulticlass) bound to `options`; throws std::invalid_argument for the others.
void add_training_flags(CLI::App& app, TrainingTool tool, MulticlassRunOptions& options);

/// train_binary_probes' flags, and train_probes' (the tools' mains take them as they are).
void add_binary_training_flags(CLI::App& app, BinaryRunOptions& options);
void add_multiclass_training_flags(CLI::App& app, MulticlassRunOptions& options);

}  // namespace probekit::probes
