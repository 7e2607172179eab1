// train_probes: one multiclass (softmax) probe over every label of an activation file. Flags and defaults are
// the reference's (train_probes.py).
#include <fmt/format.h>

#include "cli/cli.h"
#include "device/torch/gpu_utils.h"
#include "probes/multiclass_trainer.h"
#include "probes/training_flags.h"

using namespace probekit;

int main(int argc, char** argv) {
  ToolCommandLine tool(argv, "Train a multiclass probe on an HDF5 activation file", OpenMpWaiting::kAsConfigured);
  probes::MulticlassRunOptions options;
  bool print_json = false;
  tool.app.add_option("--activations", options.activations, "A layer_{L}_activations.h5 file")->required();
  tool.app.add_option("--output-dir", options.output_dir, "Where the probes and metrics go")->capture_default_str();
  probes::add_training_flags(tool.app, probes::TrainingTool::kMulticlass, options);
  tool.app.add_flag("--json", print_json, "Print a JSON summary on stdout at the end");
  return tool.run(argc, argv, [&] {
    device::configure_threads(tool.common.threads);
    Json summary = probes::run_multiclass_training(options);
    if (print_json) fmt::print("{}\n", dump_json(summary));
  });
}
