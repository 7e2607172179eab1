// train_probes: one multiclass (softmax) probe over every label of an activation file. Flags and defaults are
// the reference's (train_probes.py).
#include <fmt/format.h>

#include "cli/torch/torch_tool.h"
#include "probes/run_summary.h"
#include "probes/training_flags.h"

using namespace probekit;

int main(int argc, char** argv) {
  return run_tool_main<probes::MulticlassRunOptions>(
      argc, argv, "Train a multiclass probe on an HDF5 activation file", probes::add_multiclass_training_flags,
      [](probes::MulticlassRunOptions& options) {
        Json summary = probes::run_multiclass_training(options);
        fmt::print("{}", options.json ? dump_json(summary) + "\n" : probes::multiclass_summary_text(summary));
      },
      probes::kTrainingInterruptNote);
}
