// The batched probe bank: hand-written gradients against finite differences, AdamW against the arithmetic
// of torch.optim.AdamW, the learning-rate schedule against the reference's logged rates, dropout masks.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "probes/probe_bank.h"
#include "probes/random_streams.h"
#include "probes/token_rows.h"

using namespace probekit::probes;

namespace {

// Checks backward() of a small bank in double precision against central differences of
// sum(c * logits), for every `stride`-th parameter element (every parameter tensor is reached).
void check_gradients(const ProbeShape& shape, int64_t probes, int64_t batch, int64_t stride) {
  ProbeBank bank(shape, probes, at::TensorOptions().dtype(at::kDouble));
  for (int64_t p = 0; p < probes; ++p) bank.initialize_probe(p, 100 + p);
  // Non-zero attention biases, so that their gradients are exercised away from the initial zeros.
  bank.values().add_(at::randn_like(bank.values()) * 0.05);
  at::Tensor x = at::randn({batch, shape.input_dim}, at::kDouble);
  at::Tensor keep = draw_dropout_masks(shape, 7, 0, batch);
  at::Tensor weights = at::randn({batch, probes, shape.outputs}, at::kDouble);
  auto objective = [&] { return (bank.forward_train(x, keep).logits * weights).sum().item<double>(); };

  bank.backward(bank.forward_train(x, keep), weights);
  at::Tensor analytic = bank.gradients().clone();
  double* values = bank.values().data_ptr<double>();
  const double* expected = analytic.data_ptr<double>();
  const double step = 1e-6;
  int64_t checked = 0;
  for (int64_t i = 0; i < bank.values().numel(); i += stride) {
    double saved = values[i];
    values[i] = saved + step;
    double up = objective();
    values[i] = saved - step;
    double down = objective();
    values[i] = saved;
    double numeric = (up - down) / (2 * step);
    INFO("flat parameter element " << i << ": analytic " << expected[i] << ", finite difference " << numeric);
    CHECK(std::fabs(expected[i] - numeric) <= 1e-6 * std::max(1.0, std::fabs(numeric)));
    ++checked;
  }
  CHECK(checked == (bank.values().numel() + stride - 1) / stride);
}

}  // namespace

TEST_CASE("linear probe gradients equal finite differences") {
  ProbeShape shape;
  shape.input_dim = 7;
  shape.outputs = 3;
  check_gradients(shape, 4, 5, 1);
}

TEST_CASE("multi-head probe gradients equal finite differences, with zero query/key gradients") {
  ProbeShape shape;
  shape.kind = &probe_kind("multihead");
  shape.input_dim = 6;
  shape.hidden_dim = 16;  // 8 heads of 2 dimensions
  shape.outputs = 2;
  shape.dropout = 0.3;
  check_gradients(shape, 2, 5, 3);

  ProbeBank bank(shape, 3, at::TensorOptions().dtype(at::kDouble));
  for (int64_t p = 0; p < 3; ++p) bank.initialize_probe(p, p);
  at::Tensor x = at::randn({4, 6}, at::kDouble);
  bank.backward(bank.forward_train(x, draw_dropout_masks(shape, 1, 0, 4)),
                at::ones({4, 3, 2}, at::kDouble));
  size_t in_proj = 4;
  REQUIRE(bank.specs()[in_proj].name == "attention.in_proj_weight");
  at::Tensor grad = bank.parameter_in(bank.gradients(), in_proj);
  CHECK(grad.narrow(1, 0, 32).abs().max().item<double>() == 0.0);
  CHECK(grad.narrow(1, 32, 16).abs().max().item<double>() > 0.0);
}

TEST_CASE("linear logits are x W^T + b for each probe") {
  ProbeShape shape;
  shape.input_dim = 5;
  ProbeBank bank(shape, 3, at::TensorOptions().dtype(at::kDouble));
  for (int64_t p = 0; p < 3; ++p) bank.initialize_probe(p, p);
  at::Tensor x = at::randn({4, 5}, at::kDouble);
  at::Tensor logits = bank.forward(x);  // [4, 3, 1]
  for (int64_t p = 0; p < 3; ++p) {
    at::Tensor expected = x.matmul(bank.parameter(0)[p][0]) + bank.parameter(1)[p][0];
    CHECK(at::allclose(logits.select(1, p).select(1, 0), expected, 1e-12, 1e-12));
  }
}

TEST_CASE("initialisation follows PyTorch's default bounds and depends only on the stream key") {
  ProbeShape shape;
  shape.kind = &probe_kind("multihead");
  shape.input_dim = 100;
  shape.hidden_dim = 64;
  ProbeBank bank(shape, 2, at::TensorOptions());
  bank.initialize_probe(0, 42);
  bank.initialize_probe(1, 42);
  for (size_t i = 0; i < bank.specs().size(); ++i) {
    at::Tensor both = bank.parameter(i);
    INFO(bank.specs()[i].name);
    CHECK(at::equal(both[0], both[1]));
  }
  // encoder.0: U(+-1/sqrt(100)); in_proj_weight [192, 64]: xavier U(+-sqrt(6/256)); in_proj_bias: 0.
  CHECK(bank.parameter(0).abs().max().item<float>() <= 0.1f);
  CHECK(bank.parameter(0).abs().max().item<float>() > 0.09f);
  CHECK(bank.parameter(4).abs().max().item<float>() <= std::sqrt(6.0f / 256.0f));
  CHECK(bank.parameter(5).abs().max().item<float>() == 0.0f);
  CHECK(bank.parameter(7).abs().max().item<float>() == 0.0f);
}

TEST_CASE("AdamW takes torch.optim.AdamW's first step and leaves masked elements untouched") {
  // p = 1, g = 0.5, lr = 0.1, weight decay 0.01: p <- 1 * (1 - 0.001) = 0.999; m = 0.05, v = 0.00025;
  // bias corrections 0.1 and 0.001: step size 1, denominator sqrt(0.00025)/sqrt(0.001) + 1e-8 = 0.5 + 1e-8;
  // p <- 0.999 - 0.05 / (0.5 + 1e-8).
  at::Tensor values = at::ones({2}, at::kDouble);
  at::Tensor grads = at::full({2}, 0.5, at::kDouble);
  AdamW adamw(values, AdamW::Options{0.01});
  adamw.step(values, grads, 0.1, at::tensor({1, 0}, at::kByte).to(at::kBool));
  CHECK(values[0].item<double>() == doctest::Approx(0.999 - 0.05 / (0.5 + 1e-8)).epsilon(1e-14));
  CHECK(values[1].item<double>() == 1.0);
  double first = values[0].item<double>();
  adamw.step(values, grads, 0.1, at::zeros({2}, at::kBool));
  CHECK(values[0].item<double>() == first);
  CHECK(values[1].item<double>() == 1.0);
}

TEST_CASE("cosine annealing gives the reference's logged learning rates") {
  // From the reference's metrics files: T_max 50, eta_min 1e-5.
  std::vector<double> rates = epoch_learning_rates(5e-4, 50, true, 1e-5);
  CHECK(rates[0] == 0.0005);
  CHECK(rates[1] == 0.0004995165484649266);
  CHECK(rates[49] > 1e-5);
  CHECK(rates[49] < 2e-5);
  CHECK(epoch_learning_rates(1e-3, 3, false, 0.0) == std::vector<double>{1e-3, 1e-3, 1e-3});
}

TEST_CASE("dropout keep flags: rate p, one draw per attention head, independent of where drawing starts") {
  ProbeShape shape;
  shape.kind = &probe_kind("multihead");
  shape.input_dim = 10;
  shape.hidden_dim = 32;  // heads of 4 dimensions
  at::Tensor all = draw_dropout_masks(shape, 99, 0, 2000);
  CHECK(at::equal(all.narrow(0, 500, 100), draw_dropout_masks(shape, 99, 500, 100)));
  double dropped = all.narrow(1, 0, 64).eq(0).to(at::kDouble).mean().item<double>();
  CHECK(dropped == doctest::Approx(0.1).epsilon(0.05));
  CHECK(all.max().item<uint8_t>() == 1);
  at::Tensor heads = all.narrow(1, 64, 32).view({2000, 8, 4});
  CHECK(at::equal(heads, heads.narrow(2, 0, 1).expand({2000, 8, 4})));
}

TEST_CASE("the batch order is a permutation fixed by its key") {
  std::vector<int64_t> order = shuffled_order(stream_key(3, Stream::kBatchOrder, 5), 1000);
  CHECK(std::set<int64_t>(order.begin(), order.end()).size() == 1000);
  CHECK(order == shuffled_order(stream_key(3, Stream::kBatchOrder, 5), 1000));
  CHECK(order != shuffled_order(stream_key(3, Stream::kBatchOrder, 6), 1000));
}

namespace {

// Texts of 1, 4 and 7 tokens, packed, and the batch of all three (read from their first token).
struct AttentionCase {
  ProbeShape shape;
  std::vector<int64_t> offsets = {0, 1, 5, 12};
  at::Tensor rows = at::randn({12, 6}, at::kDouble);
  TokenBatch batch() const {
    TokenLayout layout = token_layout(offsets, shape);
    std::vector<int64_t> texts = {0, 1, 2};
    return token_batch(rows, token_index(layout, texts.data(), 3));
  }
};

AttentionCase attention_case(int64_t outputs) {
  AttentionCase c;
  c.shape.kind = &probe_kind("attention");
  c.shape.input_dim = 6;
  c.shape.heads = 2;
  c.shape.outputs = outputs;
  c.shape.dropout = 0.0;
  return c;
}

// EleutherAI's AttentionProbe.forward on padded x [B, T, H] with mask and position [B, T], for one probe's
// parameters: [B, O].
at::Tensor eleuther_logits(const at::Tensor& x, const at::Tensor& mask, const at::Tensor& position,
                           const std::vector<at::Tensor>& p, int64_t heads, int64_t outputs) {
  at::Tensor k = at::matmul(x, p[1].t()) - (1.0 - mask).unsqueeze(-1) * 1e9 + position.unsqueeze(-1) * p[0];
  at::Tensor weights = at::softmax(k, 1);
  at::Tensor values = (at::matmul(x, p[2].t()) + p[3]).unflatten(-1, {heads, outputs});
  return (weights.unsqueeze(-1) * values).sum(at::IntArrayRef{1, 2});
}

// The packed texts of `c` padded to [3, 7, H] with mask and position, as EleutherAI's trainer feeds them.
std::vector<at::Tensor> padded_texts(const AttentionCase& c) {
  at::Tensor x = at::zeros({3, 7, 6}, at::kDouble), mask = at::zeros({3, 7}, at::kDouble);
  at::Tensor position = at::zeros({3, 7}, at::kDouble);
  for (int64_t b = 0; b < 3; ++b) {
    int64_t n = c.offsets[b + 1] - c.offsets[b];
    x[b].narrow(0, 0, n).copy_(c.rows.narrow(0, c.offsets[b], n));
    mask[b].narrow(0, 0, n).fill_(1.0);
    position[b].narrow(0, 0, n).copy_(at::arange(n, at::kDouble));
  }
  return {x, mask, position};
}

}  // namespace

TEST_CASE("attention probe logits and gradients equal autograd through EleutherAI's padded AttentionProbe") {
  for (int64_t outputs : {1, 2}) {
    AttentionCase c = attention_case(outputs);
    ProbeBank bank(c.shape, 3, at::TensorOptions().dtype(at::kDouble));
    for (int64_t p = 0; p < 3; ++p) bank.initialize_probe(p, 40 + p);
    bank.values().add_(at::randn_like(bank.values()) * 0.3);  // queries and position weights away from zero
    TokenBatch batch = c.batch();
    TrainActivations saved = c.shape.kind->forward_tokens(bank, batch);
    at::Tensor g = at::randn({3, 3, outputs}, at::kDouble);
    bank.backward(saved, g);

    std::vector<at::Tensor> leaves;
    for (size_t i = 0; i < bank.specs().size(); ++i) leaves.push_back(bank.parameter(i).clone().set_requires_grad(true));
    std::vector<at::Tensor> padded = padded_texts(c);
    at::Tensor objective = at::zeros({}, at::kDouble);
    for (int64_t p = 0; p < 3; ++p) {
      std::vector<at::Tensor> own = {leaves[0][p], leaves[1][p], leaves[2][p], leaves[3][p]};
      at::Tensor expected = eleuther_logits(padded[0], padded[1], padded[2], own, 2, outputs);
      CHECK(at::allclose(saved.logits.select(1, p), expected.detach(), 1e-10, 1e-12));
      objective = objective + (expected * g.select(1, p)).sum();
    }
    objective.backward();
    for (size_t i = 0; i < leaves.size(); ++i) {
      INFO(bank.specs()[i].name << ", outputs " << outputs);
      CHECK(at::allclose(bank.parameter_in(bank.gradients(), i), leaves[i].grad(), 1e-9, 1e-12));
    }
  }
}

TEST_CASE("attention probe: a new probe is mean pooling of its values; a one-token text gets weight 1") {
  AttentionCase c = attention_case(1);
  ProbeBank bank(c.shape, 2, at::TensorOptions().dtype(at::kDouble));
  for (int64_t p = 0; p < 2; ++p) bank.initialize_probe(p, p);
  CHECK(bank.parameter(0).abs().max().item<double>() == 0.0);  // position_weight
  CHECK(bank.parameter(1).abs().max().item<double>() == 0.0);  // q.weight
  TrainActivations saved = c.shape.kind->forward_tokens(bank, c.batch());
  for (int64_t b = 0; b < 3; ++b) {
    at::Tensor mean = c.rows.narrow(0, c.offsets[b], c.offsets[b + 1] - c.offsets[b]).mean(0);
    for (int64_t p = 0; p < 2; ++p) {
      at::Tensor heads = at::matmul(bank.parameter(2)[p], mean) + bank.parameter(3)[p];  // [h]
      CHECK(saved.logits[b][p][0].item<double>() == doctest::Approx(heads.sum().item<double>()).epsilon(1e-12));
    }
  }
  bank.values().add_(at::randn_like(bank.values()));
  at::Tensor weights = c.shape.kind->token_weights(bank, c.shape.kind->forward_tokens(bank, c.batch()));  // [R, K, h]
  CHECK(at::allclose(weights[0], at::ones({2, 2}, at::kDouble)));
  CHECK(at::allclose(weights.narrow(0, 1, 4).sum(0), at::ones({2, 2}, at::kDouble)));
}
