// K probes of one kind held as one batched set of parameters, so that K probes train as one problem: every
// parameter is stored as [K, <the reference module's shape>], a contiguous block of one flat buffer, which makes
// the linear probes one [B, H] x [H, K] product, the multi-head probes batched matrix products over K, and AdamW a
// handful of element-wise operations over the whole buffer. The kind (probe_kind.h) computes the passes;
// gradients are written by hand (no autograd).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "probes/probe_kind.h"

namespace probekit::probes {

/// Columns of one example's dropout mask (the kind's dropout layout).
int64_t mask_width(const ProbeShape& shape);

/// What a training forward pass keeps for the backward pass.
struct TrainActivations {
  at::Tensor input;   // [B, H]: as given, or after the input dropout (linear)
  at::Tensor masks;   // [B, mask_width], values 0 or 1/(1-p), in the bank's dtype
  at::Tensor logits;  // [B, K, O]
  std::vector<at::Tensor> intermediates;  // what the kind's backward pass needs besides
};

class ProbeBank {
 public:
  /// A bank of `probes` probes with zeroed parameters on the device and dtype of `options`.
  ProbeBank(const ProbeShape& shape, int64_t probes, at::TensorOptions options);

  const ProbeShape& shape() const { return shape_; }
  int64_t probes() const { return probes_; }
  const std::vector<ParameterSpec>& specs() const { return specs_; }
  /// The flat buffer of every parameter of every probe; views into it are the parameters.
  at::Tensor& values() { return values_; }
  const at::Tensor& values() const { return values_; }
  /// The gradients of the last backward(), laid out as values().
  const at::Tensor& gradients() const { return gradients_; }
  /// Parameter `index` of every probe: [K, <shape>], a view of values().
  at::Tensor parameter(size_t index) const;
  /// Parameter `index` of every probe inside `flat`, a buffer laid out as values().
  at::Tensor parameter_in(const at::Tensor& flat, size_t index) const;

  /// Fills probe `probe` with PyTorch's default initialisation of the reference module (the kind's bounds), drawn
  /// from the stream `key`.
  void initialize_probe(int64_t probe, uint64_t key);

  /// Spreads a per-probe tensor [K] over the flat layout: element i takes the value of its probe.
  at::Tensor per_element(const at::Tensor& per_probe) const;

  /// Evaluation-mode logits [N, K, O] of activations [N, H] (no dropout), computed in row chunks.
  at::Tensor forward(const at::Tensor& input) const;

  /// Training-mode forward of one batch [B, H] with dropout keep flags [B, mask_width] (0 or 1, any dtype),
  /// shared by all probes; kept values are scaled by 1/(1-p) as in torch's dropout.
  TrainActivations forward_train(const at::Tensor& input, const at::Tensor& keep) const;

  /// Writes into gradients() the gradient of sum(grad_logits * logits) for the batch of `forward_train`.
  void backward(const TrainActivations& saved, const at::Tensor& grad_logits);

 private:
  at::Tensor forward_chunk(const at::Tensor& input) const;

  ProbeShape shape_;
  int64_t probes_ = 0;
  const ProbeKind* kind_;
  std::vector<ParameterSpec> specs_;
  at::Tensor values_, gradients_;
};

/// Dropout keep flags for rows [first_row, first_row + rows) of one epoch's batch order: [rows, mask_width]
/// uint8 on the CPU, each 0 with probability p and 1 otherwise, drawn from stream `key` by position.
at::Tensor draw_dropout_masks(const ProbeShape& shape, uint64_t key, int64_t first_row, int64_t rows);

/// One epoch of training batches: the shuffled order of the rows (from the seed and the epoch) and the
/// dropout keep flags of each position (from the seed, the epoch and the position), shared by every probe.
/// Both are made once and sent to the training device at construction, so a step needs no transfer and no
/// synchronisation, and several threads may read one EpochBatches at once.
class EpochBatches {
 public:
  EpochBatches(const ProbeShape& shape, uint64_t seed, int64_t epoch, int64_t rows, int64_t batch_size,
               at::Device device);

  int64_t steps() const { return (rows_ + batch_size_ - 1) / batch_size_; }
  int64_t batch_size() const { return batch_size_; }
  /// The shuffled order of the rows, on the host.
  const std::vector<int64_t>& order() const { return host_order_; }
  /// The row indices of batch `step` ([B], int64, on the device).
  at::Tensor rows(int64_t step) const;
  /// The dropout keep flags of batch `step` ([B, mask_width], uint8, on the device).
  at::Tensor keep(int64_t step) const;

 private:
  int64_t rows_, batch_size_;
  std::vector<int64_t> host_order_;
  at::Tensor order_, keep_;
};

/// The learning rate of each epoch: constant, or torch's CosineAnnealingLR(T_max=epochs, eta_min) stepped once
/// per epoch, in its recursive form so the values match the reference's logged rates bit for bit.
std::vector<double> epoch_learning_rates(double lr, int64_t epochs, bool cosine, double eta_min);

/// PyTorch's AdamW (amsgrad off) over a flat buffer, with every probe's state in one tensor. Probes stop at
/// different epochs: a step may be restricted to the elements of the probes still training, whose step
/// counts are therefore all equal, so one count serves them all.
class AdamW {
 public:
  struct Options {
    double weight_decay = 1e-2;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
  };

  AdamW(const at::Tensor& values, Options options);

  /// One update of `values` from `gradients` at learning rate `lr`. With `active` (bool, laid out as values)
  /// only those elements and their moments change; the others stay exactly as they were.
  void step(at::Tensor& values, const at::Tensor& gradients, double lr, const at::Tensor& active = {});

  int64_t steps() const { return steps_; }

 private:
  Options options_;
  at::Tensor exp_avg_, exp_avg_sq_;
  int64_t steps_ = 0;
};

}  // namespace probekit::probes
