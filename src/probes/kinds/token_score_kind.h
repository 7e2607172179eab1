// What the ema and rolling monitor probes share: each token of a text gets a linear score s_i = w . x_i + b, and the
// text's logit is a weighted sum of its scores, sum_i c_i s_i, with weights that sum to 1 chosen by the kind's
// aggregation (the moving average at its highest point, the mean of the highest window). The weights the forward pass
// chose are held fixed by the backward pass: the gradient of a maximum, exact wherever the choice does not change.
// Its state dict is linear.weight [O, H] and linear.bias [O], a linear probe's, so its direction steers.
#pragma once

#include "probes/probe_kind.h"

namespace probekit::probes {

class TokenScoreKind : public ProbeKind {
  enum Parameter : size_t { kWeight, kBias };
  // Positions in TrainActivations::intermediates: each row's weight [R, K*O] and its text [R].
  enum Saved : size_t { kRowWeights, kText };

 public:
  bool reads_every_token() const override { return true; }
  int64_t default_heads() const override { return 1; }
  std::vector<ParameterSpec> parameters(const ProbeShape& shape) const override;
  DropoutLayout dropout_layout(const ProbeShape&) const override { return {0, 0, 1}; }
  int64_t evaluation_width(const ProbeShape& shape) const override { return 4 * shape.outputs; }
  TrainActivations forward(const ProbeBank& bank, const at::Tensor& input, const at::Tensor& masks) const override;
  TrainActivations forward_tokens(const ProbeBank& bank, const TokenBatch& batch) const override;
  void backward(const ProbeBank& bank, const TrainActivations& saved, const at::Tensor& grad_logits,
                std::vector<at::Tensor>& grads) const override;
  /// Each read row's weight in its text's logit, [R, K, O].
  at::Tensor token_weights(const ProbeBank& bank, const TrainActivations& saved) const override;
  at::Tensor direction(const ProbeBank& bank, int64_t probe, int64_t output) const override;
  at::Tensor row_logits(const ProbeBank& bank, const at::Tensor& rows) const override;

  /// The weights [B, T, n] of each text's token scores `scores` [B, T, n] (padding: NaN past each text's
  /// `lengths` [B]) in its logit: each column's weights sum to 1 over the text's tokens.
  virtual at::Tensor aggregation_weights(const at::Tensor& scores, const at::Tensor& lengths,
                                         const ProbeShape& shape) const = 0;
};

/// One-hot weights [B, T, n] at the highest of `values` [B, T, n] along T, NaN padding never chosen.
at::Tensor one_hot_of_max(const at::Tensor& values);

}  // namespace probekit::probes
