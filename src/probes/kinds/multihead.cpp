// The reference's multi-head probe:
//   encoder = Linear(H, h) ReLU Dropout(p) Linear(h, h) ReLU Dropout(p);
//   MultiheadAttention(h, heads, dropout=p) over the length-1 sequence [encoded]; Linear(h, O).
// Over a length-1 sequence the attention softmax weight is exactly 1, so attention reduces to
// out_proj(W_v x + b_v) (W_v = rows [2h, 3h) of in_proj_weight), with dropout on that one weight per example
// and head in training; the query and key rows get a zero gradient (they are still decayed by AdamW).
// K probes run as batched matrix products over K.
#include <fmt/format.h>

#include <cmath>

#include "probes/kinds/kinds.h"
#include "probes/probe_bank.h"

namespace probekit::probes {

// The kind's own names, in a namespace of their own: the kinds' files share a unity build's translation units.
namespace multihead_kind {

// Positions in parameters() of the multi-head probe's parameters.
enum Parameter : size_t {
  kEncoder0Weight, kEncoder0Bias, kEncoder3Weight, kEncoder3Bias, kInProjWeight, kInProjBias,
  kOutProjWeight, kOutProjBias, kClassifierWeight, kClassifierBias
};
// Positions in TrainActivations::intermediates, each [K, B, h].
enum Saved : size_t { kPreRelu1, kEncoded1, kPreRelu2, kEncoded2, kAttended, kAttentionOut };

at::Tensor transpose_last(const at::Tensor& t) { return t.transpose(-1, -2); }

// bias [K, n] as [K, 1, n], to add to every row of a [K, B, n] batch.
at::Tensor row_bias(const at::Tensor& bias) { return bias.unsqueeze(1); }

class MultiheadKind : public ProbeKind {
 public:
  const char* name() const override { return "multihead"; }
  std::string reference_class(bool binary) const override { return binary ? "BinaryMultiHeadProbe" : "MultiHeadProbe"; }
  std::vector<std::string> own_flags() const override { return {"--hidden-dim", "--heads"}; }

  std::string shape_problem(const ProbeShape& s) const override {
    if (s.heads > 0 && s.hidden_dim > 0 && s.hidden_dim % s.heads == 0) return "";
    return fmt::format("--hidden-dim {} must be a positive multiple of the {} attention heads", s.hidden_dim, s.heads);
  }

  std::vector<ParameterSpec> parameters(const ProbeShape& s) const override {
    const int64_t h = s.hidden_dim;
    return {{"encoder.0.weight", {h, s.input_dim}},   {"encoder.0.bias", {h}},
            {"encoder.3.weight", {h, h}},             {"encoder.3.bias", {h}},
            {"attention.in_proj_weight", {3 * h, h}}, {"attention.in_proj_bias", {3 * h}},
            {"attention.out_proj.weight", {h, h}},    {"attention.out_proj.bias", {h}},
            {"classifier.weight", {s.outputs, h}},    {"classifier.bias", {s.outputs}}};
  }

  double initial_bound(const std::vector<ParameterSpec>& specs, size_t index) const override {
    const ParameterSpec& spec = specs.at(index);
    if (index == kInProjWeight) return std::sqrt(6.0 / static_cast<double>(spec.shape[0] + spec.shape[1]));  // xavier
    if (index == kInProjBias || index == kOutProjBias) return 0.0;
    return ProbeKind::initial_bound(specs, index);
  }

  // Both encoder dropouts per element, then the attention weight's: one draw per head.
  DropoutLayout dropout_layout(const ProbeShape& s) const override {
    return {2 * s.hidden_dim, s.hidden_dim, s.hidden_dim / s.heads};
  }
  int64_t evaluation_width(const ProbeShape& s) const override { return s.hidden_dim; }

  TrainActivations forward(const ProbeBank& bank, const at::Tensor& x, const at::Tensor& masks) const override;
  void backward(const ProbeBank& bank, const TrainActivations& saved, const at::Tensor& grad_logits,
                std::vector<at::Tensor>& grads) const override;

  void describe(const ProbeShape& s, Json& fields) const override {
    fields["hidden_dim"] = s.hidden_dim;
    fields["num_heads"] = s.heads;
  }
  void read_shape(const Json& index, const std::string& where, ProbeShape& s) const override {
    s.hidden_dim = json_value<int64_t>(index, "hidden_dim", 512, where);
    s.heads = json_value<int64_t>(index, "num_heads", 8, where);
  }
};

TrainActivations MultiheadKind::forward(const ProbeBank& bank, const at::Tensor& x, const at::Tensor& dropout) const {
  const int64_t batch = x.size(0), k = bank.probes(), h = bank.shape().hidden_dim;
  const at::Tensor masks = dropout.defined() ? dropout : at::ones({batch, 3 * h}, x.options());
  TrainActivations saved;
  saved.masks = masks;
  saved.input = x;
  at::Tensor mask1 = masks.narrow(1, 0, h), mask2 = masks.narrow(1, h, h), attention_mask = masks.narrow(1, 2 * h, h);
  std::vector<at::Tensor>& s = saved.intermediates;
  s.resize(kAttentionOut + 1);
  // One [B, H] x [H, K*h] product for the first layer of all K encoders.
  at::Tensor w1 = bank.parameter(kEncoder0Weight).view({k * h, bank.shape().input_dim});
  s[kPreRelu1] = at::addmm(bank.parameter(kEncoder0Bias).view({k * h}), x, w1.t()).view({batch, k, h}).permute({1, 0, 2});
  s[kEncoded1] = at::relu(s[kPreRelu1]) * mask1;  // [K, B, h]
  s[kPreRelu2] = at::baddbmm(row_bias(bank.parameter(kEncoder3Bias)), s[kEncoded1],
                             transpose_last(bank.parameter(kEncoder3Weight)));
  s[kEncoded2] = at::relu(s[kPreRelu2]) * mask2;
  at::Tensor value_weight = bank.parameter(kInProjWeight).narrow(1, 2 * h, h);  // W_v: [K, h, h]
  at::Tensor value_bias = bank.parameter(kInProjBias).narrow(1, 2 * h, h);
  s[kAttended] = at::baddbmm(row_bias(value_bias), s[kEncoded2], transpose_last(value_weight)) * attention_mask;
  s[kAttentionOut] = at::baddbmm(row_bias(bank.parameter(kOutProjBias)), s[kAttended],
                                 transpose_last(bank.parameter(kOutProjWeight)));
  at::Tensor logits = at::baddbmm(row_bias(bank.parameter(kClassifierBias)), s[kAttentionOut],
                                  transpose_last(bank.parameter(kClassifierWeight)));  // [K, B, O]
  saved.logits = logits.permute({1, 0, 2});
  return saved;
}

void MultiheadKind::backward(const ProbeBank& bank, const TrainActivations& saved, const at::Tensor& grad_logits,
                             std::vector<at::Tensor>& grads) const {
  const int64_t batch = saved.input.size(0), k = bank.probes(), h = bank.shape().hidden_dim;
  const std::vector<at::Tensor>& s = saved.intermediates;
  at::Tensor mask1 = saved.masks.narrow(1, 0, h), mask2 = saved.masks.narrow(1, h, h);
  at::Tensor attention_mask = saved.masks.narrow(1, 2 * h, h);
  at::Tensor g = grad_logits.permute({1, 0, 2}).contiguous();  // [K, B, O]

  at::bmm_out(grads[kClassifierWeight], transpose_last(g), s[kAttentionOut]);
  at::sum_out(grads[kClassifierBias], g, at::IntArrayRef{1});
  at::Tensor grad_out = at::bmm(g, bank.parameter(kClassifierWeight));  // [K, B, h]

  at::bmm_out(grads[kOutProjWeight], transpose_last(grad_out), s[kAttended]);
  at::sum_out(grads[kOutProjBias], grad_out, at::IntArrayRef{1});
  at::Tensor grad_value = at::bmm(grad_out, bank.parameter(kOutProjWeight)) * attention_mask;

  at::Tensor value_weight = bank.parameter(kInProjWeight).narrow(1, 2 * h, h);
  grads[kInProjWeight].narrow(1, 2 * h, h).copy_(at::bmm(transpose_last(grad_value), s[kEncoded2]));
  grads[kInProjBias].narrow(1, 2 * h, h).copy_(grad_value.sum(1));
  at::Tensor grad_pre2 = at::threshold_backward(at::bmm(grad_value, value_weight) * mask2, s[kPreRelu2], 0);

  at::bmm_out(grads[kEncoder3Weight], transpose_last(grad_pre2), s[kEncoded1]);
  at::sum_out(grads[kEncoder3Bias], grad_pre2, at::IntArrayRef{1});
  at::Tensor grad_pre1 =
      at::threshold_backward(at::bmm(grad_pre2, bank.parameter(kEncoder3Weight)) * mask1, s[kPreRelu1], 0);

  // One [K*h, B] x [B, H] product for the first layer of all K encoders.
  at::Tensor encoder0_grad = grads[kEncoder0Weight].view({k * h, bank.shape().input_dim});
  at::mm_out(encoder0_grad, grad_pre1.permute({0, 2, 1}).reshape({k * h, batch}), saved.input);
  at::sum_out(grads[kEncoder0Bias], grad_pre1, at::IntArrayRef{1});
}

}  // namespace multihead_kind

std::unique_ptr<ProbeKind> make_multihead_kind() { return std::make_unique<multihead_kind::MultiheadKind>(); }

}  // namespace probekit::probes
