// EleutherAI's attention probe (attention-probes' AttentionProbe(d_in, n_heads, output_dim), no MLP, no tanh) over
// every token of a text: head j of a probe scores token i by s_ij = q_j . x_i + w_j pos_i (pos_i the token's index
// in its text as captured), a softmax over the text's tokens gives weights a_ij, each head reads its own values
// u_ij = v_j x_i + c_j, and the logit is the sum over heads of sum_i a_ij u_ij. q and w start at zero, so a new probe
// is mean pooling. Its state dict is position_weight [h], q.weight [h, H], v.weight [h*O, H], v.bias [h*O].
//
// Token rows stay packed, text after text: q.weight and v.weight are adjacent in the flat buffer, so one product
// projects every row for every probe's queries and values, and one gives both gradients. Only the scalar scores
// go through a padded [B, longest, K*h] tensor, for the softmax over each text (no atomics: deterministic).
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "probes/kinds/kinds.h"
#include "probes/probe_bank.h"
#include "probes/token_rows.h"

namespace probekit::probes {

// The kind's own names, in a namespace of their own: the kinds' files share a unity build's translation units.
namespace attention_kind {

enum Parameter : size_t { kPositionWeight, kQueryWeight, kValueWeight, kValueBias };
// Positions in TrainActivations::intermediates: weights [R, K*h], values [R, K*h*O], pools [B, K*h*O], and the
// batch's text [R] and position [R] of each row.
enum Saved : size_t { kWeights, kValues, kPools, kText, kPosition };

// The rows of q.weight and v.weight of every probe as one matrix [K*h*(1+O), H] of `flat` (values or gradients).
at::Tensor projection_rows(const ProbeBank& bank, const at::Tensor& flat) {
  const ProbeShape& s = bank.shape();
  const ParameterSpec& query = bank.specs()[kQueryWeight];
  const int64_t rows = bank.probes() * s.heads * (1 + s.outputs);
  return flat.narrow(0, query.offset, rows * s.input_dim).view({rows, s.input_dim});
}

class AttentionKind : public ProbeKind {
 public:
  const char* name() const override { return "attention"; }
  std::string reference_class(bool) const override { return "AttentionProbe"; }
  bool reads_every_token() const override { return true; }
  int64_t default_heads() const override { return 1; }
  std::vector<std::string> own_flags() const override { return {"--heads", "--max-tokens"}; }

  std::string shape_problem(const ProbeShape& s) const override {
    if (s.heads < 1) return fmt::format("--heads must be positive, got {}", s.heads);
    if (s.max_tokens < 0) return fmt::format("--max-tokens must be 0 (all) or positive, got {}", s.max_tokens);
    return "";
  }

  std::vector<ParameterSpec> parameters(const ProbeShape& s) const override {
    return {{"position_weight", {s.heads}},
            {"q.weight", {s.heads, s.input_dim}},
            {"v.weight", {s.heads * s.outputs, s.input_dim}},
            {"v.bias", {s.heads * s.outputs}}};
  }

  // q and the position weight start at zero (uniform attention); v as a Linear.
  double initial_bound(const std::vector<ParameterSpec>& specs, size_t index) const override {
    if (index == kPositionWeight || index == kQueryWeight) return 0.0;
    return 1.0 / std::sqrt(static_cast<double>(specs.at(kValueWeight).shape.at(1)));
  }

  DropoutLayout dropout_layout(const ProbeShape&) const override { return {0, 0, 1}; }
  // Per token row: the projection, the padded scores and weights.
  int64_t evaluation_width(const ProbeShape& s) const override { return 3 * s.heads * (1 + s.outputs); }

  TrainActivations forward(const ProbeBank&, const at::Tensor&, const at::Tensor&) const override {
    throw std::logic_error("an attention probe reads every token of a text: call forward_tokens");
  }
  TrainActivations forward_tokens(const ProbeBank& bank, const TokenBatch& batch) const override;
  void backward(const ProbeBank& bank, const TrainActivations& saved, const at::Tensor& grad_logits,
                std::vector<at::Tensor>& grads) const override;
  at::Tensor token_weights(const ProbeBank& bank, const TrainActivations& saved) const override {
    return saved.intermediates[kWeights].view({-1, bank.probes(), bank.shape().heads});
  }

  void describe(const ProbeShape& s, Json& fields) const override {
    fields["num_heads"] = s.heads;
    describe_token_reading(s, fields);
  }
  void read_shape(const Json& index, const std::string& where, ProbeShape& s) const override {
    s.heads = json_value<int64_t>(index, "num_heads", 1, where);
    read_token_reading(index, where, s);
  }
};

TrainActivations AttentionKind::forward_tokens(const ProbeBank& bank, const TokenBatch& batch) const {
  const ProbeShape& s = bank.shape();
  const int64_t k = bank.probes(), heads = k * s.heads, values = heads * s.outputs;
  TrainActivations saved;
  saved.input = batch.rows;
  at::Tensor projected = at::mm(batch.rows, projection_rows(bank, bank.values()).t());  // [R, K*h*(1+O)]
  at::Tensor scores = at::addcmul(projected.narrow(1, 0, heads), batch.position.unsqueeze(1),
                                  bank.parameter(kPositionWeight).view({1, heads}));
  at::Tensor u = projected.narrow(1, heads, values) + bank.parameter(kValueBias).view({1, values});
  at::Tensor weights = at::softmax(padded_by_text(scores, batch, -std::numeric_limits<double>::infinity()), 1)
                           .view({-1, heads})
                           .index_select(0, batch.row_slot);
  at::Tensor weighted = (u.view({-1, heads, s.outputs}) * weights.unsqueeze(2)).view({-1, values});
  at::Tensor pools = padded_by_text(weighted, batch, 0.0).sum(1);  // [B, K*h*O]
  saved.logits = pools.view({batch.texts, k, s.heads, s.outputs}).sum(2);
  saved.intermediates = {weights, u, pools, batch.text, batch.position};
  return saved;
}

// du_i = g a_i; ds_i = a_i sum_o g_o (u_io - pool_o); dW = [ds | du]^T X; dc = sum_i du_i; dw = sum_i ds_i pos_i.
void AttentionKind::backward(const ProbeBank& bank, const TrainActivations& saved, const at::Tensor& grad_logits,
                             std::vector<at::Tensor>& grads) const {
  const ProbeShape& s = bank.shape();
  const int64_t k = bank.probes(), heads = k * s.heads, rows = saved.input.size(0);
  const std::vector<at::Tensor>& v = saved.intermediates;
  const at::Tensor& text = v[kText];
  // Each head of a probe gets its probe's gradient: [B, K, O] -> [B, K*h, O], then one row per token.
  at::Tensor g = grad_logits.unsqueeze(2).expand({-1, k, s.heads, s.outputs}).reshape({-1, heads, s.outputs});
  at::Tensor g_rows = g.index_select(0, text);                                    // [R, K*h, O]
  at::Tensor pools = v[kPools].view({-1, heads, s.outputs}).index_select(0, text);  // [R, K*h, O]
  at::Tensor weights = v[kWeights];
  at::Tensor du = g_rows * weights.unsqueeze(2);
  at::Tensor ds = weights * (g_rows * (v[kValues].view({rows, heads, s.outputs}) - pools)).sum(2);
  at::Tensor projection_grad = projection_rows(bank, bank.gradients());
  at::mm_out(projection_grad, at::cat({ds, du.view({rows, -1})}, 1).t(), saved.input);
  at::sum_out(grads[kValueBias], du.view({rows, k, s.heads * s.outputs}), at::IntArrayRef{0});
  at::sum_out(grads[kPositionWeight], (ds * v[kPosition].unsqueeze(1)).view({rows, k, s.heads}), at::IntArrayRef{0});
}

}  // namespace attention_kind

std::unique_ptr<ProbeKind> make_attention_kind() { return std::make_unique<attention_kind::AttentionKind>(); }

}  // namespace probekit::probes
