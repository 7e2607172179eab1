// The options both probe trainers share, and their one validation. Each trainer's options derive from
// TrainingOptions and set its own defaults (each follows its reference script), which the flags' --help shows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "probes/probe_bank.h"

namespace probekit::probes {

struct TrainingOptions {
  /// The defaults that differ between the trainers; the others are the same for both.
  TrainingOptions(int64_t batch_size, int64_t epochs, double lr, double weight_decay)
      : batch_size(batch_size), epochs(epochs), lr(lr), weight_decay(weight_decay) {}

  const ProbeKind* kind = &probe_kind("linear");
  int64_t hidden_dim = 512;  // of the multihead probe
  std::optional<int64_t> heads;  // of the multihead and attention probes; unset: the kind's default
  int64_t max_tokens = 0;        // of the attention probe: the last rows of a text it reads (0: all)
  double ema_alpha = 0.1;        // of the ema probe
  int64_t window_tokens = 16;    // of the rolling probe
  int64_t sparse_k = 16;         // of the sparse-logistic probe: the columns each probe keeps
  // Per-row kinds given a --position all file (train_binary_probes --pool): each text's row is its last token
  // ("last") or the mean of its tokens after the leading specials ("mean"), as capture pools them; empty: refused.
  std::string pool;
  int64_t batch_size;
  int64_t epochs;        // the most; binary probes may stop early
  double lr;             // AdamW
  double weight_decay;   // AdamW
  uint64_t seed = 0;     // of initialisation, batch order and dropout, and of the test metrics' bootstrap
  // Kinds fitted by their own solver (logistic, mean-diff): sklearn's C, the inverse strength of the L2 penalty,
  // and the solver's limits.
  double C = 1.0;
  solvers::LbfgsOptions solver;
  // The reference's --pin-activations-to-gpu (its default): every split moved to the training device once.
  // Off (--no-pin-activations), they stay in host memory and each batch is copied to the device when used.
  bool pin_activations = true;
};

/// The largest values the trainers take: past them a run would hold memory for nothing or never end (a billion
/// epochs allocated their history up front), and a probe's shape fails to allocate with LibTorch's own words.
constexpr int64_t kMaxEpochs = 1'000'000;
constexpr int64_t kMaxTrainingBatch = int64_t{1} << 30;
constexpr int64_t kMaxHiddenDim = 65'536;
constexpr int64_t kMaxHeads = 4'096;

/// Throws UsageError naming the flag of the first value no trainer can use: epochs, batch size, hidden size and
/// heads must be positive and at most the bounds above, the learning rate finite and positive, the weight decay
/// finite and not negative, C finite and positive.
void check_training_options(const TrainingOptions& options);

/// Throws UsageError for a flag of `given` that no kind of `kinds` reads, naming the kinds that do (those train_probes
/// trains, for `multiclass`): such a flag would be ignored without a word (--k with --model-type linear).
void check_own_flags(const std::vector<const ProbeKind*>& kinds, const std::vector<std::string>& given,
                     bool multiclass = false);

/// The shape of the probes these options train over `input_dim` activations, with `outputs` logits each.
ProbeShape probe_shape(const TrainingOptions& options, int64_t input_dim, int64_t outputs);

/// Throws UsageError, naming the kind's own flags (--hidden-dim, --heads), when `probes` probes of `shape` trained
/// together cannot fit the memory of `device`: their values, gradients, AdamW's two moments and the best epoch's
/// copy, in `dtype`. Checked before anything is allocated: LibTorch's failure would name no flag.
void check_bank_memory(const ProbeShape& shape, int64_t probes, at::Device device, at::ScalarType dtype);

}  // namespace probekit::probes
