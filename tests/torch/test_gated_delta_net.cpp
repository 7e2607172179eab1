// The gated delta rule of Qwen3-Next's and Qwen3.5's linear-attention layers: the chunked form the prefill runs
// against the token-by-token recurrence (transformers' decode), on random inputs across chunk boundaries, with
// rows whose state must stop at their own length (a right-padded batch, generation's committed tokens).
#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "model/gated_delta_net.h"

using namespace probekit;

namespace {

// max |a - b| / max |b|
double relative_error(const at::Tensor& actual, const at::Tensor& expected) {
  return (actual - expected).abs().max().item<double>() / expected.abs().max().item<double>();
}

struct RuleInputs {
  at::Tensor q, k, v, g, beta, initial;
};

// q and k l2-normalized per head (q scaled by dk^-0.5) as the layer makes them, log decays <= 0, beta in (0, 1).
RuleInputs random_inputs(int64_t batch, int64_t heads, int64_t tokens, int64_t dk, int64_t dv) {
  auto unit = [&](const at::Tensor& x) { return x / x.norm(2, -1, true); };
  RuleInputs in;
  in.q = unit(at::randn({batch, heads, tokens, dk})) / std::sqrt(static_cast<double>(dk));
  in.k = unit(at::randn({batch, heads, tokens, dk}));
  in.v = at::randn({batch, heads, tokens, dv});
  in.g = -at::softplus(at::randn({batch, heads, tokens})) * 0.5;
  in.beta = at::sigmoid(at::randn({batch, heads, tokens}));
  in.initial = at::randn({batch, heads, dk, dv}) * 0.5;
  return in;
}

}  // namespace

TEST_CASE(
    "gated delta rule: chunks of 64 give the token-by-token recurrence, and each row's state stops at its length") {
  at::manual_seed(20261125);
  const int64_t batch = 3, heads = 2, dk = 8, dv = 6;
  for (int64_t tokens : {1, 5, 63, 64, 65, 150}) {
    CAPTURE(tokens);
    RuleInputs in = random_inputs(batch, heads, tokens, dk, dv);
    const model::DeltaRuleResult recurrent =
        model::gated_delta_rule_recurrent(in.q, in.k, in.v, in.g, in.beta, in.initial);
    const model::DeltaRuleResult chunked = model::gated_delta_rule_chunked(in.q, in.k, in.v, in.g, in.beta, in.initial);
    CHECK(relative_error(chunked.outputs, recurrent.outputs) <= 1e-5);
    CHECK(relative_error(chunked.state, recurrent.state) <= 1e-5);

    // Row 0 commits every token, row 1 about half, row 2 none (a row that has stopped): each state is that of
    // its own tokens run alone, while the outputs stay those of every token.
    const std::vector<int64_t> lengths = {tokens, (tokens + 1) / 2, 0};
    const at::Tensor commit = at::tensor(lengths, at::kLong);
    const model::DeltaRuleResult committed =
        model::gated_delta_rule_chunked(in.q, in.k, in.v, in.g, in.beta, in.initial, commit);
    const model::DeltaRuleResult committed_recurrent =
        model::gated_delta_rule_recurrent(in.q, in.k, in.v, in.g, in.beta, in.initial, commit);
    CHECK(relative_error(committed.outputs, recurrent.outputs) <= 1e-5);
    for (int64_t b = 0; b < batch; ++b) {
      CAPTURE(b);
      const int64_t n = lengths[static_cast<size_t>(b)];
      at::Tensor alone = in.initial.narrow(0, b, 1);
      if (n > 0) {
        auto first = [&](const at::Tensor& x) { return x.narrow(0, b, 1).narrow(2, 0, n); };
        alone = model::gated_delta_rule_recurrent(first(in.q), first(in.k), first(in.v), first(in.g), first(in.beta),
                                                  in.initial.narrow(0, b, 1))
                    .state;
      }
      CHECK(relative_error(committed.state.narrow(0, b, 1), alone) <= 1e-5);
      CHECK(relative_error(committed_recurrent.state.narrow(0, b, 1), alone) <= 1e-5);
    }
  }
}

TEST_CASE("gated delta rule: a chunked prefill continued by single steps equals one pass over all the tokens") {
  at::manual_seed(11);
  RuleInputs in = random_inputs(2, 3, 70, 4, 5);
  const model::DeltaRuleResult whole = model::gated_delta_rule_chunked(in.q, in.k, in.v, in.g, in.beta, in.initial);
  auto span = [](const at::Tensor& x, int64_t start, int64_t length) { return x.narrow(2, start, length); };
  model::DeltaRuleResult part = model::gated_delta_rule_chunked(span(in.q, 0, 67), span(in.k, 0, 67), span(in.v, 0, 67),
                                                                span(in.g, 0, 67), span(in.beta, 0, 67), in.initial);
  std::vector<at::Tensor> outputs = {part.outputs};
  for (int64_t t = 67; t < 70; ++t) {
    part = model::gated_delta_rule_chunked(span(in.q, t, 1), span(in.k, t, 1), span(in.v, t, 1), span(in.g, t, 1),
                                           span(in.beta, t, 1), part.state);
    outputs.push_back(part.outputs);
  }
  CHECK(relative_error(at::cat(outputs, 2), whole.outputs) <= 1e-5);
  CHECK(relative_error(part.state, whole.state) <= 1e-5);
}
