// train_binary_probes: one-vs-rest probes for every label of one or several activation files, all labels of a
// file trained at once. Flags and defaults are the reference's (train_binary_probes_parallel.py).
#include <fmt/format.h>

#include "common/cli.h"
#include "common/json.h"
#include "device/gpu_utils.h"
#include "probes/binary_run.h"

using namespace probekit;

int main(int argc, char** argv) {
  CLI::App app{"Train binary (one-vs-rest) probes for every label of HDF5 activation files"};
  CommonOptions common;
  add_common_options(app, common);
  probes::BinaryRunOptions options;
  probes::BinaryTrainingOptions& t = options.training;
  std::string model_type = "linear", pos_weight = "none";
  bool no_scheduler = false, print_json = false;

  app.add_option("--activations", options.activations,
                 "layer_{L}_activations.h5 files, or directories holding them (one layer_{L}/ output folder each)")
      ->required();
  app.add_option("--output-dir", options.output_dir, "Where probes, metrics and report.html go")->capture_default_str();
  app.add_option("--model-type", model_type, "Probe architecture")
      ->check(CLI::IsMember({"linear", "multihead"}))
      ->capture_default_str();
  app.add_option("--hidden-dim", t.hidden_dim, "Hidden size of the multihead probe")->capture_default_str();
  app.add_option("--batch-size", t.batch_size, "Training batch size")->capture_default_str();
  app.add_option("--epochs", t.epochs, "Maximum epochs")->capture_default_str();
  app.add_option("--lr", t.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--weight-decay", t.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--early-stopping-patience", t.patience,
                 "Epochs without a better validation AUROC before a probe stops (0: never stop)")
      ->capture_default_str();
  app.add_flag("--use-scheduler", t.cosine_schedule, "Cosine annealing of the learning rate to 1e-5 (the default)");
  app.add_flag("--no-scheduler", no_scheduler, "Keep the learning rate constant");
  app.add_option("--device", options.device, "auto|cpu|cuda|cuda:N|rocm|mps")->capture_default_str();
  app.add_option("--dtype", options.dtype, "auto (fp32 for training)|fp32|bf16")->capture_default_str();
  app.add_option("--num-workers", options.num_workers,
                 "Accepted for compatibility; every label of a file trains in one batched problem")
      ->capture_default_str();
  app.add_option("--seed", t.seed, "Seed of initialisation, batch order and dropout")->capture_default_str();
  app.add_option("--pos-weight", pos_weight, "none, or auto: BCE pos_weight = negatives/positives per label")
      ->check(CLI::IsMember({"none", "auto"}))
      ->capture_default_str();
  app.add_option("--labels", t.labels, "Train only these labels (comma-separated)")->delimiter(',');
  app.add_flag("--json", print_json, "Print a JSON summary on stdout at the end");

  return run_tool(app, argc, argv, common, [&] {
    device::configure_threads(common.threads);
    t.kind = probes::parse_kind(model_type);
    t.cosine_schedule = !no_scheduler;
    t.balance_classes = pos_weight == "auto";
    Json summary = probes::run_binary_training(options);
    if (print_json) fmt::print("{}\n", dump_json(summary));
  });
}
