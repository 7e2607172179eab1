// train_binary_probes: one-vs-rest probes for every label of one or several activation files, all labels of a
// file trained at once. Flags and defaults are the reference's (train_binary_probes_parallel.py).
#include <fmt/format.h>

#include "cli/torch/torch_tool.h"
#include "probes/run_summary.h"
#include "probes/training_flags.h"

using namespace probekit;

int main(int argc, char** argv) {
  return run_tool_main<probes::BinaryRunOptions>(
      argc, argv, "Train binary (one-vs-rest) probes for every label of HDF5 activation files",
      probes::add_binary_training_flags,
      [](probes::BinaryRunOptions& options) {
        Json summary = probes::run_binary_training(options);
        fmt::print("{}", options.json ? dump_json(summary) + "\n" : probes::binary_summary_text(summary));
      },
      probes::kTrainingInterruptNote);
}
