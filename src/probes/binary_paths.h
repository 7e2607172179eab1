// The two ways a bank of one-vs-rest probes is trained, behind train_binary_probes (binary_trainer.cpp), which
// picks one by its kind and evaluates either's weights the same way: by gradient steps over epochs with early
// stopping (binary_steps.cpp), or by the kind's own solver on the whole train split (binary_fit.cpp).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "probes/binary_trainer.h"
#include "probes/training_data.h"

namespace probekit::probes {

/// What both ways read.
struct BinaryInputs {
  const activations::ActivationFile& file;
  const BinaryTrainingOptions& options;
  const ProbeShape& shape;
  at::TensorOptions tensor_options;  // the training device and dtype
  const TrainingSplit& val_x;        // in the training dtype
  std::string progress_label;
};

/// The weights to save (`best`) and those the training ended with.
struct TrainedWeights {
  ProbeBank best;
  at::Tensor final_values;  // laid out as best.values()
  int64_t epochs_run = 0;
};

/// Trains the probes of `trained` by AdamW steps, recording each label's history, best epoch and early stop.
TrainedWeights train_by_steps(const BinaryInputs& in, std::vector<TrainedLabel>& trained);

/// Fits the probes of `trained` with their kind's solver (ProbeKind::fit) in double precision, recording each
/// label's solver outcome and a history of one entry (the fit counts as epoch 1).
TrainedWeights fit_by_solver(const BinaryInputs& in, std::vector<TrainedLabel>& trained);

/// BCEWithLogitsLoss(pos_weight) per element of logits [B, K] (fp32) against 0/1 targets [B, K], and its
/// gradient by the logits.
std::pair<at::Tensor, at::Tensor> bce_with_logits(const at::Tensor& logits, const at::Tensor& targets,
                                                  const at::Tensor& pos_weight);

/// 0/1 targets [N, K] (float32) of a split for the labels `label_indices` [K] (int64, on the device).
at::Tensor binary_targets(const activations::SplitData& split, const at::Tensor& label_indices);

/// The 0/1 truth of one label over a split's rows.
std::vector<int> column_labels(const activations::SplitData& split, int64_t label);

/// Column `column` of CPU logits [N, K] as doubles.
std::vector<double> column_scores(const at::Tensor& logits_cpu, int64_t column);

}  // namespace probekit::probes
