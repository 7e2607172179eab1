// The reference's linear probe: Dropout(p) -> Linear(H, O). K probes are one [B, H] x [H, K*O] product.
#include "device/torch/row_stable.h"
#include "probes/kinds/linear_kind.h"
#include "probes/probe_bank.h"

namespace probekit::probes {

std::vector<ParameterSpec> LinearKind::parameters(const ProbeShape& s) const {
  return {{"linear.weight", {s.outputs, s.input_dim}}, {"linear.bias", {s.outputs}}};
}

TrainActivations LinearKind::forward(const ProbeBank& bank, const at::Tensor& x, const at::Tensor& masks) const {
  const int64_t batch = x.size(0), k = bank.probes(), o = bank.shape().outputs;
  TrainActivations saved;
  saved.masks = masks;
  saved.input = masks.defined() ? x * masks : x;
  at::Tensor weight = bank.parameter(kWeight).view({k * o, bank.shape().input_dim});
  saved.logits = device::row_stable_linear(saved.input, weight, bank.parameter(kBias).view({k * o})).view({batch, k, o});
  return saved;
}

void LinearKind::backward(const ProbeBank& bank, const TrainActivations& saved, const at::Tensor& grad_logits,
                          std::vector<at::Tensor>& grads) const {
  const int64_t batch = saved.input.size(0), k = bank.probes(), o = bank.shape().outputs;
  at::Tensor g = grad_logits.reshape({batch, k * o});
  at::Tensor weight_grad = grads[kWeight].view({k * o, bank.shape().input_dim});
  at::Tensor bias_grad = grads[kBias].view({k * o});
  at::mm_out(weight_grad, g.t(), saved.input);
  at::sum_out(bias_grad, g, at::IntArrayRef{0});
}

at::Tensor LinearKind::direction(const ProbeBank& bank, int64_t probe, int64_t output) const {
  at::Tensor rows = bank.parameter(kWeight)[probe].to(at::kFloat);  // [O, H]
  at::Tensor direction = rows.size(0) == 1 ? rows[0] : rows[output] - rows.mean(0);
  return direction / direction.norm();
}

void LinearKind::store(ProbeBank& bank, const at::Tensor& weight, const at::Tensor& bias) {
  bank.parameter(kWeight).copy_(weight.reshape(bank.parameter(kWeight).sizes()));
  bank.parameter(kBias).copy_(bias.reshape(bank.parameter(kBias).sizes()));
}

std::unique_ptr<ProbeKind> make_linear_kind() { return std::make_unique<LinearKind>(); }

}  // namespace probekit::probes
