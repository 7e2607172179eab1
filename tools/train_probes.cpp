// train_probes: one multiclass (softmax) probe over every label of an activation file. Flags and defaults are
// the reference's (train_probes.py).
#include <fmt/format.h>

#include "common/cli.h"
#include "common/json.h"
#include "device/gpu_utils.h"
#include "probes/multiclass_trainer.h"

using namespace probekit;

int main(int argc, char** argv) {
  CLI::App app{"Train a multiclass probe on an HDF5 activation file"};
  CommonOptions common;
  add_common_options(app, common);
  probes::MulticlassRunOptions options;
  probes::MulticlassTrainingOptions& t = options.training;
  std::string model_type = "linear";
  bool print_json = false;

  app.add_option("--activations", options.activations, "A layer_{L}_activations.h5 file")->required();
  app.add_option("--output-dir", options.output_dir, "Where the probes and metrics go")->capture_default_str();
  app.add_option("--model-type", model_type, "Probe architecture")
      ->check(CLI::IsMember({"linear", "multihead"}))
      ->capture_default_str();
  app.add_option("--hidden-dim", t.hidden_dim, "Hidden size of the multihead probe")->capture_default_str();
  app.add_option("--batch-size", t.batch_size, "Training batch size")->capture_default_str();
  app.add_option("--epochs", t.epochs, "Epochs")->capture_default_str();
  app.add_option("--lr", t.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--weight-decay", t.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--device", options.device, "auto|cpu|cuda|cuda:N|rocm|mps")->capture_default_str();
  app.add_option("--dtype", options.dtype, "auto (fp32 for training)|fp32|bf16")->capture_default_str();
  app.add_option("--seed", t.seed, "Seed of initialisation, batch order and dropout")->capture_default_str();
  app.add_flag("--json", print_json, "Print a JSON summary on stdout at the end");

  return run_tool(app, argc, argv, common, [&] {
    device::configure_threads(common.threads);
    t.kind = probes::parse_kind(model_type);
    Json summary = probes::run_multiclass_training(options);
    if (print_json) fmt::print("{}\n", dump_json(summary));
  });
}
