#include "probes/kinds/token_score_kind.h"

#include <cmath>
#include <limits>

#include "probes/probe_bank.h"
#include "probes/token_rows.h"

namespace probekit::probes {

std::vector<ParameterSpec> TokenScoreKind::parameters(const ProbeShape& s) const {
  return {{"linear.weight", {s.outputs, s.input_dim}}, {"linear.bias", {s.outputs}}};
}

TrainActivations TokenScoreKind::forward(const ProbeBank&, const at::Tensor&, const at::Tensor&) const {
  throw std::logic_error(std::string("a ") + name() + " probe reads every token of a text: call forward_tokens");
}

at::Tensor TokenScoreKind::row_logits(const ProbeBank& bank, const at::Tensor& rows) const {
  const int64_t columns = bank.probes() * bank.shape().outputs;
  at::Tensor weight = bank.parameter(kWeight).reshape({columns, bank.shape().input_dim});
  return at::addmm(bank.parameter(kBias).reshape({1, columns}), rows, weight.t());  // [R, K*O]
}

TrainActivations TokenScoreKind::forward_tokens(const ProbeBank& bank, const TokenBatch& batch) const {
  const ProbeShape& s = bank.shape();
  const int64_t columns = bank.probes() * s.outputs;
  at::Tensor scores = row_logits(bank, batch.rows);  // [R, K*O]
  at::Tensor padded = padded_by_text(scores, batch, std::numeric_limits<double>::quiet_NaN());
  at::Tensor lengths = at::zeros({batch.texts}, batch.text.options()).index_add_(0, batch.text, at::ones_like(batch.text));
  at::Tensor weights = aggregation_weights(padded, lengths, s);  // [B, T, K*O]
  TrainActivations saved;
  saved.input = batch.rows;
  saved.logits = (padded.nan_to_num(0.0) * weights).sum(1).view({batch.texts, bank.probes(), s.outputs});
  saved.intermediates = {weights.reshape({-1, columns}).index_select(0, batch.row_slot), batch.text};
  return saved;
}

// logit = sum_i c_i (w . x_i + b) with c fixed: dW = sum_i g c_i x_i, db = g sum_i c_i = g.
void TokenScoreKind::backward(const ProbeBank& bank, const TrainActivations& saved, const at::Tensor& grad_logits,
                              std::vector<at::Tensor>& grads) const {
  const int64_t columns = bank.probes() * bank.shape().outputs;
  at::Tensor g = grad_logits.reshape({-1, columns});
  at::Tensor g_rows = g.index_select(0, saved.intermediates[kText]) * saved.intermediates[kRowWeights];  // [R, K*O]
  at::Tensor weight_grad = grads[kWeight].view({columns, bank.shape().input_dim});
  at::mm_out(weight_grad, g_rows.t(), saved.input);
  grads[kBias].view({columns}).copy_(g.sum(0));
}

at::Tensor TokenScoreKind::token_weights(const ProbeBank& bank, const TrainActivations& saved) const {
  return saved.intermediates[kRowWeights].view({-1, bank.probes(), bank.shape().outputs});
}

at::Tensor TokenScoreKind::direction(const ProbeBank& bank, int64_t probe, int64_t output) const {
  at::Tensor w = bank.parameter(kWeight)[probe][output].to(at::kFloat);
  return w / w.norm();
}

at::Tensor one_hot_of_max(const at::Tensor& values) {
  at::Tensor best = values.nan_to_num(-std::numeric_limits<double>::infinity()).argmax(1, true);  // [B, 1, n]
  return at::zeros_like(values).scatter_(1, best, 1.0);
}

}  // namespace probekit::probes
