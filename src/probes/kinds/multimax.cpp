// The multimax monitor probe (the "MultiMax" architecture of the probes deployed on Gemini): --heads h (default 8),
// each head j with a query vector q_j and value vectors v_j (one per output). Head j takes the token of the text
// with the highest query score q_j . x_i and reads its value v_j . x_i*; the logit is the heads' values summed plus
// a bias. A hard maximum where the attention kind takes a softmax, so that a long text does not dilute the token
// that matters. The maximum gives the queries no gradient: training passes them the gradient of the softmax over the
// same scores (a straight-through estimator), while the values and the bias get their exact gradients. Its state
// dict is q.weight [h, H], v.weight [h*O, H], bias [O].
#include <fmt/format.h>

#include <limits>

#include "probes/kinds/kinds.h"
#include "probes/probe_bank.h"
#include "probes/token_rows.h"

namespace probekit::probes {

// The kind's own names, in a namespace of their own: the kinds' files share a unity build's translation units.
namespace multimax_kind {

enum Parameter : size_t { kQueryWeight, kValueWeight, kBias };
// Positions in TrainActivations::intermediates: every row's values [R, K*h*O] and softmax weights [R, K*h], the
// row each head chose in each text [B, K*h], each row's text [R].
enum Saved : size_t { kValues, kSoftWeights, kChosen, kText };

class MultimaxKind : public ProbeKind {
 public:
  const char* name() const override { return "multimax"; }
  std::string reference_class(bool) const override { return "MultiMaxProbe"; }
  bool reads_every_token() const override { return true; }
  int64_t default_heads() const override { return 8; }
  std::vector<std::string> own_flags() const override { return {"--heads", "--max-tokens"}; }

  std::string shape_problem(const ProbeShape& s) const override {
    if (s.heads < 1) return fmt::format("--heads must be positive, got {}", s.heads);
    return "";
  }
  std::vector<ParameterSpec> parameters(const ProbeShape& s) const override {
    return {{"q.weight", {s.heads, s.input_dim}}, {"v.weight", {s.heads * s.outputs, s.input_dim}}, {"bias", {s.outputs}}};
  }
  DropoutLayout dropout_layout(const ProbeShape&) const override { return {0, 0, 1}; }
  int64_t evaluation_width(const ProbeShape& s) const override { return 3 * s.heads * (1 + s.outputs); }
  TrainActivations forward(const ProbeBank&, const at::Tensor&, const at::Tensor&) const override {
    throw std::logic_error("a multimax probe reads every token of a text: call forward_tokens");
  }
  TrainActivations forward_tokens(const ProbeBank& bank, const TokenBatch& batch) const override;
  void backward(const ProbeBank& bank, const TrainActivations& saved, const at::Tensor& grad_logits,
                std::vector<at::Tensor>& grads) const override;
  /// Each read row's weight per head: 1 for the token the head chose, 0 elsewhere, [R, K, h].
  at::Tensor token_weights(const ProbeBank& bank, const TrainActivations& saved) const override;
  /// A running maximum per head: each row's query and values computed once, a prefix that grows its predecessor by
  /// a row compares that row alone.
  at::Tensor prefix_logits(const ProbeBank& bank, const at::Tensor& values, const TokenLayout& prefixes) const override;

  void describe(const ProbeShape& s, Json& fields) const override {
    fields["num_heads"] = s.heads;
    describe_token_reading(s, fields);
  }
  void read_shape(const Json& index, const std::string& where, ProbeShape& s) const override {
    s.heads = json_value<int64_t>(index, "num_heads", 8, where);
    read_token_reading(index, where, s);
  }
};

TrainActivations MultimaxKind::forward_tokens(const ProbeBank& bank, const TokenBatch& batch) const {
  const ProbeShape& s = bank.shape();
  const int64_t k = bank.probes(), heads = k * s.heads, rows = batch.rows.size(0);
  at::Tensor queries = at::mm(batch.rows, bank.parameter(kQueryWeight).reshape({heads, s.input_dim}).t());  // [R, K*h]
  at::Tensor values = at::mm(batch.rows, bank.parameter(kValueWeight).reshape({heads * s.outputs, s.input_dim}).t());
  at::Tensor padded = padded_by_text(queries, batch, -std::numeric_limits<double>::infinity());  // [B, T, K*h]
  at::Tensor best = padded.argmax(1);                                                             // [B, K*h]
  at::Tensor slot_rows = at::full({batch.texts * batch.longest}, -1, batch.text.options())
                             .index_copy_(0, batch.row_slot, at::arange(rows, batch.text.options()));
  at::Tensor slots = best + at::arange(batch.texts, best.options()).unsqueeze(1) * batch.longest;
  at::Tensor chosen = slot_rows.index_select(0, slots.reshape({-1})).view({batch.texts, heads});
  at::Tensor picked = values.view({rows, heads, s.outputs})
                          .gather(0, chosen.unsqueeze(2).expand({batch.texts, heads, s.outputs}));  // [B, K*h, O]
  TrainActivations saved;
  saved.input = batch.rows;
  saved.logits = picked.view({batch.texts, k, s.heads, s.outputs}).sum(2) + bank.parameter(kBias).unsqueeze(0);
  at::Tensor soft = at::softmax(padded, 1).view({-1, heads}).index_select(0, batch.row_slot);
  saved.intermediates = {values, soft, chosen, batch.text};
  return saved;
}

// Values: dv_j = sum_b g_b x_(chosen j, b). Queries (straight through the softmax a over the same scores):
// ds_i = a_i sum_o g_o (u_io - sum_l a_l u_lo), dq = sum_i ds_i x_i. Bias: sum_b g_b.
void MultimaxKind::backward(const ProbeBank& bank, const TrainActivations& saved, const at::Tensor& grad_logits,
                            std::vector<at::Tensor>& grads) const {
  const ProbeShape& s = bank.shape();
  const int64_t k = bank.probes(), heads = k * s.heads, rows = saved.input.size(0);
  const std::vector<at::Tensor>& v = saved.intermediates;
  const int64_t texts = grad_logits.size(0);
  at::Tensor g = grad_logits.unsqueeze(2).expand({texts, k, s.heads, s.outputs}).reshape({texts, heads, s.outputs});
  at::Tensor value_grads = at::zeros({rows, heads, s.outputs}, g.options())
                               .scatter_add_(0, v[kChosen].unsqueeze(2).expand({texts, heads, s.outputs}), g);
  at::Tensor value_weight_grad = grads[kValueWeight].view({heads * s.outputs, s.input_dim});
  at::mm_out(value_weight_grad, value_grads.view({rows, -1}).t(), saved.input);
  at::Tensor u = v[kValues].view({rows, heads, s.outputs});
  at::Tensor a = v[kSoftWeights];
  at::Tensor pools = at::zeros({texts, heads, s.outputs}, u.options()).index_add_(0, v[kText], u * a.unsqueeze(2));
  at::Tensor g_rows = g.index_select(0, v[kText]);
  at::Tensor ds = a * (g_rows * (u - pools.index_select(0, v[kText]))).sum(2);  // [R, K*h]
  at::Tensor query_weight_grad = grads[kQueryWeight].view({heads, s.input_dim});
  at::mm_out(query_weight_grad, ds.t(), saved.input);
  grads[kBias].copy_(grad_logits.sum(0));
}

at::Tensor MultimaxKind::token_weights(const ProbeBank& bank, const TrainActivations& saved) const {
  const std::vector<at::Tensor>& v = saved.intermediates;
  const int64_t rows = v[kValues].size(0), heads = v[kChosen].size(1);
  at::Tensor weights = at::zeros({rows, heads}, v[kValues].options());
  weights.scatter_(0, v[kChosen], 1.0);
  return weights.view({rows, bank.probes(), bank.shape().heads});
}

at::Tensor MultimaxKind::prefix_logits(const ProbeBank& bank, const at::Tensor& values, const TokenLayout& prefixes) const {
  const ProbeShape& s = bank.shape();
  const int64_t k = bank.probes(), heads = k * s.heads;
  // The queries in the bank's dtype, as forward_tokens compares them (a double's ties would fall otherwise).
  const at::Tensor queries = at::mm(values, bank.parameter(kQueryWeight).reshape({heads, s.input_dim}).t())
                                 .to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor head_values = at::mm(values, bank.parameter(kValueWeight).reshape({heads * s.outputs, s.input_dim}).t())
                                     .to(at::kCPU, at::kDouble).contiguous();
  const auto q = queries.accessor<double, 2>();
  const auto v = head_values.accessor<double, 2>();
  at::Tensor out = at::zeros({prefixes.texts(), k, s.outputs}, at::kDouble);
  auto o = out.accessor<double, 3>();
  std::vector<int64_t> best(static_cast<size_t>(heads));
  for (int64_t p = 0; p < prefixes.texts(); ++p) {
    const int64_t first = prefixes.first[p], last = first + prefixes.length[p] - 1;
    const bool grows = p > 0 && first == prefixes.first[p - 1] && prefixes.length[p] == prefixes.length[p - 1] + 1;
    const int64_t from = grows ? last : first;
    if (!grows) std::fill(best.begin(), best.end(), first);
    for (int64_t row = from; row <= last; ++row) {
      for (int64_t h = 0; h < heads; ++h) {
        if (q[row][h] > q[best[h]][h]) best[h] = row;  // the first of equal maxima, as argmax keeps
      }
    }
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t c = 0; c < s.outputs; ++c) o[p][h / s.heads][c] += v[best[h]][h * s.outputs + c];
    }
  }
  const at::Tensor bias = bank.parameter(kBias).to(at::kCPU, at::kDouble).reshape({k, s.outputs});
  return (out + bias.unsqueeze(0)).to(values.device(), values.scalar_type());
}

}  // namespace multimax_kind

std::unique_ptr<ProbeKind> make_multimax_kind() { return std::make_unique<multimax_kind::MultimaxKind>(); }

}  // namespace probekit::probes
