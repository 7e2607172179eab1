// train_binary_probes: one-vs-rest probes for every label of one or several activation files, all labels of a
// file trained at once. Flags and defaults are the reference's (train_binary_probes_parallel.py).
#include <fmt/format.h>

#include "cli/cli.h"
#include "device/torch/gpu_utils.h"
#include "probes/binary_run.h"
#include "probes/training_flags.h"

using namespace probekit;

int main(int argc, char** argv) {
  ToolCommandLine tool(argv, "Train binary (one-vs-rest) probes for every label of HDF5 activation files",
                       OpenMpWaiting::kAsConfigured);
  probes::BinaryRunOptions options;
  bool print_json = false;
  tool.app.add_option("--activations", options.activations,
                      "layer_{L}_activations.h5 files, or directories holding them (one layer_{L}/ output folder each)")
      ->required();
  tool.app.add_option("--output-dir", options.output_dir, "Where probes, metrics and report.html go")->capture_default_str();
  probes::add_training_flags(tool.app, probes::TrainingTool::kBinary, options);
  tool.app.add_flag("--json", print_json, "Print a JSON summary on stdout at the end");
  return tool.run(argc, argv, [&] {
    device::configure_threads(tool.common.threads);
    Json summary = probes::run_binary_training(options);
    if (print_json) fmt::print("{}\n", dump_json(summary));
  });
}
