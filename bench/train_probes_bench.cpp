// Benchmark of PROTOCOL section 2: 45 one-vs-rest probes on activations 3150 / 675 / 675 x 2560 with the
// reference's defaults except a fixed 20 epochs (batch 18, AdamW lr 5e-4, weight decay 1e-3, cosine annealing
// to 1e-5, dropout 0.1, no early stop). The activations are synthetic (each label's examples scattered around
// a mean of its own) and written to a temporary HDF5 file first.
//
// Prints, as one JSON line: the training time in memory (train_binary_probes), the whole run as the tool does
// it (read the file, train, write probes, metrics and report) and the mean test AUROC. --model-type logistic
// (or mean-diff) fits instead, to its solver's tolerance, with --C: its train_seconds are the logistic_train_s
// to set beside bench/python/sklearn_logistic_baseline.py on the same file (--work-dir keeps it). --tokens 60-130
// writes a --position all file instead (that many tokens per text, each label's mean on one marker token), for
// --model-type attention.
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>

#include "common/error.h"
#include "common/files.h"
#include "cli/torch/torch_tool.h"
#include "common/json.h"
#include "device/torch/gpu_utils.h"
#include "probes/binary_run.h"
#include "probes/probe_files.h"
#include "probes/synthetic_activations.h"
#include "probes/training_data.h"
#include "probes/training_flags.h"

using namespace probekit;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  TorchTool tool("Benchmark: 45 one-vs-rest probes, PROTOCOL section 2");
  probes::BinaryRunOptions run;
  probes::BinaryTrainingOptions& t = run.training;
  t.epochs = 20;
  t.patience = probes::kNeverStopEarly;
  int64_t labels = 45, hidden = 2560, repeats = 2, layer = 0;
  std::array<int64_t, 3> per_label = {70, 15, 15};
  double signal = 8.0;
  std::string work_dir, tokens;
  probes::add_training_flags(tool.app, probes::TrainingTool::kBench, run);
  tool.app.add_option("--tokens", tokens, "MIN-MAX tokens per text: a --position all file (for --model-type attention)");
  tool.app.add_option("--labels", labels, "Labels (one probe each)")->capture_default_str();
  tool.app.add_option("--hidden", hidden, "Activation width")->capture_default_str();
  tool.app.add_option("--signal", signal, "Norm of each label's mean (noise is N(0, I))")->capture_default_str();
  tool.app.add_option("--repeats", repeats, "Timed repetitions; the best is reported")->capture_default_str();
  tool.app.add_option("--layer", layer, "Layer number of the synthetic file")->capture_default_str();
  tool.app.add_option("--work-dir", work_dir, "Where the activations and outputs go and stay (default: a temporary directory)");

  return tool.run(argc, argv, [&] {
    const int threads = tool.threads();
    bool temporary = work_dir.empty();
    if (temporary) work_dir = fmt::format("{}/train_probes_bench_{}", temp_directory(), getpid());
    make_directories(work_dir);
    std::string activations_path = work_dir + "/" + activations::layer_file_name(layer);
    probes::SyntheticActivations spec = probes::uniform_synthetic(labels, per_label, hidden);
    spec.layer = layer;
    spec.signal.assign(static_cast<size_t>(labels), signal);
    if (!tokens.empty()) {
      const size_t dash = tokens.find('-');
      if (dash == std::string::npos) fail_usage("--tokens: expected MIN-MAX, got '{}'", tokens);
      spec.min_tokens = std::stoll(tokens.substr(0, dash));
      spec.max_tokens = std::stoll(tokens.substr(dash + 1));
    }
    probes::write_synthetic_activation_file(activations_path, spec);

    device::ComputeTarget target = probes::select_training_compute(run.device, run.dtype);
    activations::ActivationFile file = activations::read_activation_file(activations_path);
    double best_train = 1e30, best_run = 1e30, mean_auc = 0.0;
    for (int64_t r = 0; r < repeats; ++r) {
      auto start = std::chrono::steady_clock::now();
      probes::BinaryTrainingResult result = probes::train_binary_probes(file, t, target.device, target.dtype, "bench");
      device::synchronize(target.device);
      best_train = std::min(best_train, seconds_since(start));
      mean_auc = 0.0;
      for (const probes::TrainedLabel& label : result.labels) mean_auc += label.test_auc_roc / static_cast<double>(result.labels.size());
    }
    run.activations = {activations_path};
    run.output_dir = work_dir + "/probes";
    run.overwrite = true;  // each repeat replaces the probes of the one before
    for (int64_t r = 0; r < repeats; ++r) {
      auto start = std::chrono::steady_clock::now();
      probes::run_binary_training(run);
      best_run = std::min(best_run, seconds_since(start));
    }
    if (temporary) remove_tree(work_dir);
    Json figures = {{"benchmark", "train_binary_probes, PROTOCOL section 2"},
                    {"device", target.device.str()},
                    {"dtype", probes::dtype_label(target.dtype)},
                    {"threads", threads},
                    {"model_type", t.kind->name()},
                    {"probes", labels},
                    {"shape", fmt::format("{}/{}/{} x {}", labels * per_label[0], labels * per_label[1], labels * per_label[2], hidden)},
                    {"epochs", t.kind->fits_directly() ? Json(nullptr) : Json(t.epochs)},
                    {"tokens_per_text", tokens.empty() ? Json(nullptr) : Json(tokens)},
                    {"C", t.C},
                    {"train_seconds", best_train},
                    {"whole_run_seconds", best_run},
                    {"mean_test_auc_roc", mean_auc}};
    fmt::print("{}\n", figures.dump());
  });
}
