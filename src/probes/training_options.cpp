#include "probes/training_options.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "device/torch/gpu_utils.h"

namespace probekit::probes {

void check_training_options(const TrainingOptions& options) {
  const auto check_count = [](const char* flag, int64_t value, int64_t most) {
    if (value <= 0) fail_usage("{} must be positive, got {}", flag, value);
    if (value > most) fail_usage("{} must be at most {}, got {}", flag, most, value);
  };
  check_count("--batch-size", options.batch_size, kMaxTrainingBatch);
  check_count("--epochs", options.epochs, kMaxEpochs);
  check_count("--hidden-dim", options.hidden_dim, kMaxHiddenDim);
  if (options.heads) check_count("--heads", *options.heads, kMaxHeads);
  if (!(std::isfinite(options.lr) && options.lr > 0.0)) fail_usage("--lr must be finite and positive, got {}", options.lr);
  if (!(std::isfinite(options.weight_decay) && options.weight_decay >= 0.0)) {
    fail_usage("--weight-decay must be finite and not negative, got {}", options.weight_decay);
  }
  if (options.max_tokens < 0) fail_usage("--max-tokens must be 0 (every token) or positive, got {}", options.max_tokens);
  if (!(std::isfinite(options.C) && options.C > 0.0)) fail_usage("--C must be finite and positive, got {}", options.C);
  if (!(options.ema_alpha > 0.0 && options.ema_alpha <= 1.0)) {
    fail_usage("--ema-alpha must be in (0, 1], got {}", options.ema_alpha);
  }
  if (options.window_tokens < 1) fail_usage("--window-tokens must be positive, got {}", options.window_tokens);
  if (options.sparse_k < 1) fail_usage("--k must be positive, got {}", options.sparse_k);
}

void check_own_flags(const std::vector<const ProbeKind*>& kinds, const std::vector<std::string>& given,
                     bool multiclass) {
  const auto reads = [](const ProbeKind& kind, const std::string& flag) {
    const std::vector<std::string> flags = kind.own_flags();
    return std::find(flags.begin(), flags.end(), flag) != flags.end();
  };
  for (const std::string& flag : given) {
    if (std::any_of(kinds.begin(), kinds.end(), [&](const ProbeKind* kind) { return reads(*kind, flag); })) continue;
    std::vector<std::string> readers, trained;
    for (const std::string& name : probe_kind_names(multiclass)) {
      if (reads(probe_kind(name), flag)) readers.push_back(name);
    }
    for (const ProbeKind* kind : kinds) trained.emplace_back(kind->name());
    fail_usage("{} applies to {} probes only, and --model-type is {}", flag, fmt::join(readers, ", "),
               fmt::join(trained, ","));
  }
}

ProbeShape probe_shape(const TrainingOptions& options, int64_t input_dim, int64_t outputs) {
  ProbeShape shape;
  shape.kind = options.kind;
  shape.input_dim = input_dim;
  shape.hidden_dim = options.hidden_dim;
  shape.outputs = outputs;
  shape.heads = options.heads.value_or(shape.kind->default_heads());
  shape.max_tokens = options.max_tokens;
  shape.ema_alpha = options.ema_alpha;
  shape.window_tokens = options.window_tokens;
  shape.sparse_k = options.sparse_k;
  // A fitted probe, or a kind without dropout (attention), never drops inputs; its files say so.
  if (shape.kind->fits_directly() || mask_width(shape) == 0) shape.dropout = 0.0;
  return shape;
}

void check_bank_memory(const ProbeShape& shape, int64_t probes, at::Device device, at::ScalarType dtype) {
  constexpr double kCopies = 5;  // values, gradients, AdamW's two moments, the best epoch's values
  double parameters = 0;
  for (const ParameterSpec& spec : parameter_specs(shape)) parameters += static_cast<double>(spec.numel());
  const double needed = parameters * static_cast<double>(probes) * kCopies * static_cast<double>(c10::elementSize(dtype));
  const auto memory = static_cast<double>(device::memory_for_tensors(device));
  if (memory <= 0 || needed <= memory) return;
  std::vector<std::string> flags;  // those of the kind's flags that size its probes
  for (const std::string& flag : shape.kind->own_flags()) {
    if (flag == "--hidden-dim" || flag == "--heads") flags.push_back(flag);
  }
  std::vector<std::string> advice;
  if (!flags.empty()) advice.push_back(fmt::format("make {} smaller ({})", probes == 1 ? "it" : "them", fmt::join(flags, ", ")));
  // One bank of every label: only train_binary_probes trains several, and only it takes --labels.
  if (probes > 1) advice.emplace_back("train fewer labels at once (--labels)");
  if (advice.empty()) advice.emplace_back("train on a device with more memory (--device)");
  fail_usage("{} {} probe{} of {} inputs ({:.3g} parameters each): their parameters, gradients and optimizer state need "
             "{:.1f} GB on {}, more than its {:.1f} GB of memory; {}",
             probes, shape.kind->name(), probes == 1 ? "" : "s", shape.input_dim, parameters, needed / 1e9,
             device.str(), memory / 1e9, fmt::join(advice, " or "));
}

}  // namespace probekit::probes
