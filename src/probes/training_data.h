// What both probe trainers share: the device and dtype policy of training, the labels to train, the splits
// as tensors on the training device, the reference's way of averaging a loss over batches, output folders.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device/torch/gpu_utils.h"
#include "activations/activation_store.h"
#include "probes/probe_bank.h"
#include "probes/token_rows.h"
#include "probes/training_options.h"

namespace probekit::probes {

/// Resolves --device and --dtype for training: auto means fp32 on every device (the reference's bf16 training
/// lost accuracy), bf16 is allowed, fp16 is refused (no loss scaling).
device::ComputeTarget select_training_compute(const std::string& device_request, const std::string& dtype_request);


/// Sets LibTorch's CPU thread count for a scope and restores the previous count at its end.
class ThreadCountGuard {
 public:
  explicit ThreadCountGuard(int threads);
  ~ThreadCountGuard();
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int previous_;
};

/// Threads for the training steps of one probe on a CPU: 1 when a step is too small to gain from threads
/// (each step opens several parallel regions, and waking threads for each costs more than it saves, much
/// more when other processes share the cores), else the current count.
int threads_for_steps(const ProbeShape& shape, int64_t batch_size);

/// Throws unless the file holds activations (not expert choices) laid out as `kind` reads them: one row per
/// example (position "last" or "mean"), or every token with offsets (position "all") for an every-token kind.
void check_rows(const activations::ActivationFile& file, const ProbeKind& kind);

/// How many leading special tokens a --position all file's texts start with (token_rows.h's leading_specials_of
/// over its splits).
int64_t leading_specials(const activations::ActivationFile& file);

/// A --position all `file` as one row per text, as a capture at `position` (last or mean) would have held it: its last
/// token, or the mean of its tokens after the leading specials (a conversation's: all its masked tokens).
activations::ActivationFile pooled_rows(activations::ActivationFile file, Position position);

/// `file` as a per-row kind trains on it: a --position all file pooled per `training.pool` (one row per text: its
/// last token, or the mean of its tokens after the leading specials, with position "last" or "mean" as a capture
/// at that position records it) when the kind reads one row per text; otherwise `file` itself.
activations::ActivationFile rows_for_kind(activations::ActivationFile file, const TrainingOptions& training);

/// Indices in `names` of the labels in `subset`, in label_names order; every label when `subset` is empty.
/// Throws UsageError naming an unknown label and the known ones.
std::vector<int64_t> select_labels(const std::vector<std::string>& names, const std::vector<std::string>& subset);

/// A split's activations [N, H] in the training dtype, held on the training device (pinned: moved there once)
/// or in host memory, each read copying the rows it needs to the device (for activations larger than the
/// device's memory). On a CPU both are the same.
class SplitActivations {
 public:
  SplitActivations(const activations::SplitData& split, at::TensorOptions options, bool pinned);

  /// The rows `rows` ([B] int64 on the device) as [B, H] on the device.
  at::Tensor rows(const at::Tensor& rows) const;
  /// Every row as [N, H] on the device (a copy for the call when they are held in host memory).
  at::Tensor all() const;
  /// Where the rows are held: the training device, or the host when not pinned.
  at::Device held_on() const { return values_.device(); }
  /// The training device.
  at::Device device() const { return device_; }

 private:
  at::Tensor values_;
  at::Device device_;
};

/// A split as a trainer reads it: its activations (SplitActivations) and, for an every-token kind, the token
/// rows each text's probe reads (token_rows.h).
class TrainingSplit {
 public:
  TrainingSplit(const activations::SplitData& split, const ProbeShape& shape, at::TensorOptions options, bool pinned);

  int64_t examples() const { return examples_; }
  /// Eval-mode logits [N, K, O] of every example.
  at::Tensor logits(const ProbeBank& bank) const;
  /// An every-token kind's batches of texts for one epoch; none for a per-row kind.
  std::optional<TokenEpoch> token_epoch(const EpochBatches& batches) const;
  /// The training forward pass of batch `step` of `batches` (`tokens`: its token_epoch()).
  TrainActivations forward_train(const ProbeBank& bank, const EpochBatches& batches,
                                 const std::optional<TokenEpoch>& tokens, int64_t step) const;
  /// The inputs of the first `n` examples, [rows, H] float32 on the CPU; for an every-token kind the rows its
  /// probes read of those texts, whose row offsets go to `offsets` ([n + 1]).
  at::Tensor first_inputs(int64_t n, std::vector<int64_t>& offsets) const;
  const SplitActivations& activations() const { return x_; }

 private:
  SplitActivations x_;
  int64_t examples_ = 0;
  std::optional<TokenLayout> layout_;
  at::ScalarType dtype_;
};

/// A split's labels [N] (int64) on `device`.
at::Tensor label_tensor(const activations::SplitData& split, at::Device device);

/// The mean over batches of `batch_size` rows (the last one partial) of the per-batch mean of `losses`
/// [N, ...] along rows: what the reference's evaluate() reports as the loss of a split.
at::Tensor batch_mean(const at::Tensor& losses, int64_t batch_size);

}  // namespace probekit::probes
