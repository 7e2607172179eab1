// Fused CUDA kernels for the steps of probe training, built only against a CUDA LibTorch. A training step of
// 45 linear probes is tiny ([18, 2560] x [2560, 45]), so on a GPU its time is the launching of its element-wise
// ATen ops: about 20 for the loss and its gradient and 9 for AdamW. Each becomes one kernel here, with the
// same arithmetic in the same order; the ATen code (binary_trainer.cpp, probe_bank.cpp) is the reference they
// are tested against (tests/gpu).
#pragma once

#include <ATen/ATen.h>

namespace probekit::probes::fused {

/// BCEWithLogitsLoss(pos_weight) of logits [B, K] (fp32) against rows `rows` [B] of the 0/1 targets [N, K]:
/// adds each probe's mean loss over the batch to `loss_sum` [K] and returns the gradient of that mean by the
/// logits, [B, K] fp32.
at::Tensor bce_with_logits_batch(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& rows,
                                 const at::Tensor& pos_weight, at::Tensor& loss_sum);

/// The scalars of one AdamW step, as AdamW::step derives them.
struct AdamWStep {
  double decay, beta1, beta2, eps, bias_correction2_sqrt, step_size;
};

/// One AdamW update of fp32 `values` and its moments from `gradients`; with `active` (bool, laid out as
/// values) defined, only those elements change.
void adamw_step(at::Tensor& values, at::Tensor& exp_avg, at::Tensor& exp_avg_sq, const at::Tensor& gradients,
                const at::Tensor& active, const AdamWStep& step);

}  // namespace probekit::probes::fused
