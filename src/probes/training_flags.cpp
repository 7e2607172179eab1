#include "probes/training_flags.h"

#include <algorithm>
#include <stdexcept>

#include "cli/cli.h"
#include "probes/calibration.h"

namespace probekit::probes {

namespace {

using ToolSet = unsigned;

constexpr ToolSet tool_bit(TrainingTool tool) { return 1u << static_cast<unsigned>(tool); }

constexpr ToolSet kBinaryOnly = tool_bit(TrainingTool::kBinary);
constexpr ToolSet kMulticlassOnly = tool_bit(TrainingTool::kMulticlass);
constexpr ToolSet kTrainers = kBinaryOnly | kMulticlassOnly;
constexpr ToolSet kAllTools = kTrainers | tool_bit(TrainingTool::kBench);

// Where the flags write. `binary` is null but for train_binary_probes and the benchmark, `multiclass` but for
// train_probes.
struct FlagTargets {
  TrainingOptions& training;
  std::string& device;
  std::string& dtype;
  bool& overwrite;
  bool& json;
  BinaryRunOptions* binary;
  MulticlassRunOptions* multiclass;
};

struct TrainingFlag {
  ToolSet tools;  // the tools that take the flag
  void (*add)(CLI::App& app, const FlagTargets& to);  // adds it (or a pair of opposite flags) with its help
};

// Each flag once, in --help order. The callbacks bind to the tool's options, never to `to` itself, which
// lives only while the flags are added.
const TrainingFlag kTrainingFlags[] = {
    {kBinaryOnly,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--activations", to.binary->activations,
                      "layer_{L}_activations.h5 files, or directories holding them (one layer_{L}/ output folder each)")
           ->required();
       app.add_option("--output-dir", to.binary->output_dir, "Where probes, metrics and report.html go")
           ->capture_default_str();
       CLI::Option* calibrate_on =
           app.add_option("--calibrate-on", to.binary->calibrate_on,
                          "A capture of ordinary data (read as the training data was): each probe's threshold is set "
                          "to flag at most --target-fpr of its examples, and recorded in probes.json");
       add_target_fpr_option(app, to.binary->target_fpr, "The false-positive rate --calibrate-on allows")
           ->needs(calibrate_on);
       app.add_option("--eval-file", to.binary->eval_file,
                      "A second capture (read as the training data was) each layer's probes are also scored on: "
                      "AUROC and recall at 1% and 5% false positives in eval_metrics.json");
     }},
    {kMulticlassOnly,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--activations", to.multiclass->activations, "A layer_{L}_activations.h5 file")->required();
       app.add_option("--output-dir", to.multiclass->output_dir, "Where the probes and metrics go")
           ->capture_default_str();
     }},
    {kMulticlassOnly | tool_bit(TrainingTool::kBench),
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option_function<std::string>(
              "--model-type", [&kind = to.training.kind](const std::string& name) { kind = &probe_kind(name); },
              "Probe architecture")
           ->check(CLI::IsMember(probe_kind_names(to.multiclass != nullptr)))
           ->default_str(to.training.kind->name());
     }},
    {kBinaryOnly,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option_function<std::vector<std::string>>(
              "--model-type",
              [&run = *to.binary](const std::vector<std::string>& names) {
                run.kinds.clear();
                for (const std::string& name : names) run.kinds.push_back(&probe_kind(name));
                run.training.kind = run.kinds.front();
              },
              "Probe architecture; several, comma-separated, train each into --output-dir/<kind> and compare them "
              "(comparison.json, report.html)")
           ->delimiter(',')
           ->check(CLI::IsMember(probe_kind_names()))
           ->default_str(to.training.kind->name());
     }},
    {kAllTools,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--C", to.training.C,
                      "Inverse strength of the L2 penalty of the logistic fit, as sklearn's C (the mean-diff scale fit "
                      "takes it too)")
           ->capture_default_str();
     }},
    {kTrainers,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--hidden-dim", to.training.hidden_dim, "Hidden size of the multihead probe")
           ->capture_default_str()
           ->check(whole_number_in(1, kMaxHiddenDim));
     }},
    {kBinaryOnly,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--pool", to.training.pool,
                      "Per-row kinds on a --position all capture: each text's last token, or the mean of its tokens "
                      "after the BOS (attention probes read every token regardless)")
           ->check(CLI::IsMember({"last", "mean"}));
     }},
    {kAllTools,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option_function<int64_t>(
           "--heads", [&heads = to.training.heads](int64_t value) { heads = value; },
           "Attention heads of the multihead probe (default 8), queries of the attention probe (default 1) or heads of the "
           "multimax probe (default 8)")
           ->check(whole_number_in(1, kMaxHeads));
     }},
    {kBinaryOnly | tool_bit(TrainingTool::kBench),
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--max-tokens", to.training.max_tokens,
                      "Every-token probes (attention, ema, rolling, multimax): read only the last N tokens of each text (0: "
                      "every token)")
           ->capture_default_str();
     }},
    {kBinaryOnly | tool_bit(TrainingTool::kBench),
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--ema-alpha", to.training.ema_alpha,
                      "ema probe: the weight of each new token's score in the moving average")
           ->capture_default_str();
       app.add_option("--window-tokens", to.training.window_tokens,
                      "rolling probe: the tokens of each window whose mean score it takes the maximum of")
           ->capture_default_str();
     }},
    {kBinaryOnly,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--k", to.training.sparse_k,
                      "sparse-logistic probe: the columns (SAE latents) each probe keeps, those whose class means differ "
                      "the most on the train split")
           ->capture_default_str();
     }},
    {kTrainers,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--batch-size", to.training.batch_size, "Training batch size")
           ->capture_default_str()
           ->check(whole_number_in(1, kMaxTrainingBatch));
     }},
    {kAllTools,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--epochs", to.training.epochs, "Epochs to train (at most, where early stopping is on)")
           ->capture_default_str()
           ->check(whole_number_in(1, kMaxEpochs));
     }},
    {kTrainers,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--lr", to.training.lr, "AdamW learning rate")->capture_default_str();
     }},
    {kTrainers,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--weight-decay", to.training.weight_decay, "AdamW weight decay")->capture_default_str();
     }},
    {kBinaryOnly,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--early-stopping-patience", to.binary->training.patience,
                      "Epochs without a better validation AUROC before a probe stops (0: after its first epoch, as the "
                      "reference; -1: never stop early)")
           ->capture_default_str();
     }},
    {kBinaryOnly,
     [](CLI::App& app, const FlagTargets& to) {
       // --no-scheduler is added after --use-scheduler, so that CLI11, which runs the callbacks in the order
       // the flags were added, lets it win when both are given.
       BinaryTrainingOptions& t = to.binary->training;
       app.add_flag("--use-scheduler", t.cosine_schedule, "Cosine annealing of the learning rate to 1e-5 (the default)");
       app.add_flag_callback("--no-scheduler", [&cosine = t.cosine_schedule] { cosine = false; },
                             "Keep the learning rate constant");
     }},
    {kTrainers,
     [](CLI::App& app, const FlagTargets& to) {
       // Added in this order for the same reason as the scheduler's pair: --no-pin-activations wins.
       TrainingOptions& t = to.training;
       app.add_flag("--pin-activations-to-gpu", t.pin_activations,
                    "Move the activations to the GPU once, before training (the default)");
       app.add_flag_callback("--no-pin-activations", [&pin = t.pin_activations] { pin = false; },
                             "Keep the activations in host memory and copy each batch to the GPU");
     }},
    {kAllTools,
     [](CLI::App& app, const FlagTargets& to) {
       add_device_options(app, to.device, to.dtype, "(auto: fp32; fp16 cannot train, having no loss scaling)");
     }},
    {kBinaryOnly,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--num-workers", to.binary->num_workers,
                      "Accepted for compatibility; every label of a file trains in one batched problem")
           ->capture_default_str();
     }},
    {kTrainers,
     [](CLI::App& app, const FlagTargets& to) {
       add_overwrite_flag(app, to.overwrite);
       app.add_flag("--json", to.json, "Print a JSON summary on stdout at the end");
     }},
    {kTrainers,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--seed", to.training.seed, "Seed of initialisation, batch order and dropout")
           ->capture_default_str()
           ->check(at_least(0));
     }},
    {kBinaryOnly,
     [](CLI::App& app, const FlagTargets& to) {
       BinaryTrainingOptions& t = to.binary->training;
       app.add_option_function<std::string>(
              "--pos-weight", [&balance = t.balance_classes](const std::string& value) { balance = value == "auto"; },
              "none, or auto: BCE pos_weight = negatives/positives per label")
           ->check(CLI::IsMember({"none", "auto"}))
           ->default_str(t.balance_classes ? "auto" : "none");
     }},
    {kBinaryOnly,
     [](CLI::App& app, const FlagTargets& to) {
       app.add_option("--labels", to.binary->training.labels, "Train only these labels (comma-separated)")->delimiter(',');
     }},
};

void add_flags(CLI::App& app, TrainingTool tool, const FlagTargets& targets) {
  for (const TrainingFlag& flag : kTrainingFlags) {
    if ((flag.tools & tool_bit(tool)) != 0) flag.add(app, targets);
  }
  // train_binary_probes trains the kinds of its --model-type list; the others the one kind.
  const std::vector<const ProbeKind*>* listed = tool == TrainingTool::kBinary ? &targets.binary->kinds : nullptr;
  app.parse_complete_callback([&app, kind = &targets.training.kind, listed, multiclass = tool == TrainingTool::kMulticlass] {
    std::vector<std::string> given;
    for (const std::string& name : probe_kind_names(multiclass)) {
      for (const std::string& flag : probe_kind(name).own_flags()) {
        const CLI::Option* option = app.get_option_no_throw(flag);
        if (option != nullptr && option->count() > 0 && std::find(given.begin(), given.end(), flag) == given.end()) {
          given.push_back(flag);
        }
      }
    }
    check_own_flags(listed != nullptr ? *listed : std::vector<const ProbeKind*>{*kind}, given, multiclass);
  });
}

}  // namespace

void add_training_flags(CLI::App& app, TrainingTool tool, BinaryRunOptions& options) {
  if (tool == TrainingTool::kMulticlass) {
    throw std::invalid_argument("add_training_flags: train_probes' flags bind to MulticlassRunOptions");
  }
  add_flags(app, tool,
            {options.training, options.device, options.dtype, options.overwrite, options.json, &options, nullptr});
}

void add_training_flags(CLI::App& app, TrainingTool tool, MulticlassRunOptions& options) {
  if (tool != TrainingTool::kMulticlass) {
    throw std::invalid_argument("add_training_flags: only train_probes' flags bind to MulticlassRunOptions");
  }
  add_flags(app, tool,
            {options.training, options.device, options.dtype, options.overwrite, options.json, nullptr, &options});
}

void add_binary_training_flags(CLI::App& app, BinaryRunOptions& options) {
  add_training_flags(app, TrainingTool::kBinary, options);
}

void add_multiclass_training_flags(CLI::App& app, MulticlassRunOptions& options) {
  add_training_flags(app, TrainingTool::kMulticlass, options);
}

}  // namespace probekit::probes
