// The monitor probe kinds against their formulas, written here from docs/train_probes.md in plain tensor arithmetic
// text by text (autograd through them gives the expected gradients): ema, the highest exponential moving average of
// the token scores; rolling, the highest mean over windows of consecutive tokens. Then they learn a marker anywhere
// in a text, as production monitors must. The running aggregates a monitor policy reads, against the same formulas.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "monitor/aggregates.h"
#include "probes/binary_trainer.h"
#include "probes/probe_bank.h"
#include "probes/synthetic_activations.h"
#include "probes/token_rows.h"
#include "probe_fixture.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::probes;
using probekit::testing::TempDir;

namespace {

const std::vector<int64_t> kOffsets = {0, 1, 5, 12, 15};  // texts of 1, 4, 7 and 3 tokens

// s_i = w . x_i + b for one probe's output o; the text's rows [n, H].
at::Tensor token_scores(const at::Tensor& rows, const at::Tensor& weight, const at::Tensor& bias, int64_t o) {
  return at::mv(rows, weight[o]) + bias[o];
}

// e_0 = s_0, e_i = alpha s_i + (1 - alpha) e_{i-1}; the highest e_i.
at::Tensor ema_logit(const at::Tensor& scores, double alpha) {
  std::vector<at::Tensor> e = {scores[0]};
  for (int64_t i = 1; i < scores.size(0); ++i) e.push_back(alpha * scores[i] + (1 - alpha) * e.back());
  return at::stack(e).max();
}

// The mean of every window of `window` consecutive scores (one window of all when shorter); the highest.
at::Tensor rolling_logit(const at::Tensor& scores, int64_t window) {
  const int64_t n = scores.size(0), w = std::min(window, n);
  std::vector<at::Tensor> means;
  for (int64_t start = 0; start + w <= n; ++start) means.push_back(scores.narrow(0, start, w).mean());
  return at::stack(means).max();
}

// Two probes of `shape` (random parameters, 5-wide inputs) run forward over the four texts of kOffsets, and
// backward with random output gradients.
struct MonitorRun {
  ProbeShape shape;
  ProbeBank bank;
  at::Tensor rows = at::randn({kOffsets.back(), 5}, at::kDouble);
  TokenBatch batch;
  TrainActivations saved;
  at::Tensor g;

  MonitorRun(const char* kind, int64_t outputs, int64_t heads = 1)
      : shape(small_shape(kind, outputs, heads)), bank(shape, 2, at::TensorOptions().dtype(at::kDouble)) {
    bank.values().copy_(at::randn_like(bank.values()));
    std::vector<int64_t> texts = {0, 1, 2, 3};
    batch = token_batch(rows, token_index(token_layout(kOffsets, shape), texts.data(), 4));
    saved = shape.kind->forward_tokens(bank, batch);
    g = at::randn({4, 2, outputs}, at::kDouble);
    bank.backward(saved, g);
  }

  static ProbeShape small_shape(const char* kind, int64_t outputs, int64_t heads) {
    ProbeShape shape;
    shape.kind = &probe_kind(kind);
    shape.input_dim = 5;
    shape.outputs = outputs;
    shape.heads = heads;
    shape.dropout = 0.0;
    shape.ema_alpha = 0.3;
    shape.window_tokens = 3;
    return shape;
  }

  // Each text's weights sum to 1 for every probe and output (or head).
  void check_weights_sum_to_one() const {
    const at::Tensor weights = shape.kind->token_weights(bank, saved);  // [R, K, O or h]
    const at::Tensor per_text = at::zeros({4, 2, weights.size(2)}, at::kDouble).index_add_(0, batch.text, weights);
    CHECK(at::allclose(per_text, at::ones_like(per_text)));
  }
};

void check_kind(const char* name, int64_t outputs) {
  const MonitorRun run(name, outputs);
  const ProbeBank& bank = run.bank;
  const at::Tensor& rows = run.rows;
  const TrainActivations& saved = run.saved;
  const at::Tensor& g = run.g;
  const int64_t probes = 2;
  at::Tensor weight = bank.parameter(0).clone().set_requires_grad(true);  // [K, O, H]
  at::Tensor bias = bank.parameter(1).clone().set_requires_grad(true);    // [K, O]
  at::Tensor objective = at::zeros({}, at::kDouble);
  // Each token's own score, as --per-token and token monitors read it: the linear score the aggregation weighs.
  const at::Tensor own = bank.shape().kind->row_logits(bank, rows).view({rows.size(0), probes, outputs});
  for (int64_t t = 0; t < 4; ++t) {
    const at::Tensor text = rows.narrow(0, kOffsets[t], kOffsets[t + 1] - kOffsets[t]);
    for (int64_t p = 0; p < probes; ++p) {
      for (int64_t o = 0; o < outputs; ++o) {
        const at::Tensor scores = token_scores(text, weight[p], bias[p], o);
        CHECK(at::allclose(own.narrow(0, kOffsets[t], text.size(0)).select(1, p).select(1, o), scores.detach(), 1e-12, 1e-12));
        const at::Tensor logit = std::string(name) == "ema" ? ema_logit(scores, 0.3) : rolling_logit(scores, 3);
        INFO(name << " text " << t << " probe " << p << " output " << o);
        CHECK(saved.logits[t][p][o].item<double>() == doctest::Approx(logit.item<double>()).epsilon(1e-12));
        objective = objective + logit * g[t][p][o];
      }
    }
  }
  objective.backward();
  CHECK(at::allclose(bank.parameter_in(bank.gradients(), 0), weight.grad(), 1e-10, 1e-12));
  CHECK(at::allclose(bank.parameter_in(bank.gradients(), 1), bias.grad(), 1e-10, 1e-12));
  run.check_weights_sum_to_one();
}

// The marker's test AUROC of a `kind` probe trained 15 epochs at 5e-3 with `options`' other settings.
double marker_auroc(const activations::ActivationFile& file, const char* kind, BinaryTrainingOptions options) {
  options.kind = &probe_kind(kind);
  options.epochs = 15;
  options.lr = 5e-3;
  options.labels = {"marker"};
  const double auroc = train_binary_probes(file, options, at::kCPU, at::kFloat, kind).labels[0].test_auc_roc;
  MESSAGE(kind << ": test AUROC " << auroc);
  return auroc;
}

}  // namespace

TEST_CASE("ema probe: logits and gradients equal its formula, text by text") {
  check_kind("ema", 1);
  check_kind("ema", 2);
}

TEST_CASE("rolling probe: logits and gradients equal its formula, text by text") {
  check_kind("rolling", 1);
  check_kind("rolling", 2);
}

TEST_CASE("ema and rolling probes learn a marker token anywhere in a text") {
  TempDir tmp;
  const activations::ActivationFile file = testing::marker_activations(tmp);
  BinaryTrainingOptions options;
  options.window_tokens = 1;  // the marker is one token: its window is itself
  options.ema_alpha = 0.9;
  CHECK(marker_auroc(file, "ema", options) > 0.95);
  CHECK(marker_auroc(file, "rolling", options) > 0.95);
}

TEST_CASE("monitor kinds' settings are checked where they are given") {
  BinaryTrainingOptions options;
  options.ema_alpha = 0;
  CHECK_THROWS_WITH(check_training_options(options), doctest::Contains("--ema-alpha must be in (0, 1], got 0"));
  options.ema_alpha = 0.5;
  options.window_tokens = 0;
  CHECK_THROWS_WITH(check_training_options(options), doctest::Contains("--window-tokens must be positive, got 0"));
}

TEST_CASE("multimax probe: each head reads the value of its highest-query token; values exact, queries straight through") {
  const MonitorRun run("multimax", 2, 3);
  const at::Tensor& g = run.g;
  at::Tensor q = run.bank.parameter(0).clone().set_requires_grad(true);     // [K, h, H]
  at::Tensor v = run.bank.parameter(1).clone().set_requires_grad(true);     // [K, h*O, H]
  at::Tensor bias = run.bank.parameter(2).clone().set_requires_grad(true);  // [K, O]
  at::Tensor hard = at::zeros({}, at::kDouble), soft = at::zeros({}, at::kDouble);
  for (int64_t t = 0; t < 4; ++t) {
    const at::Tensor x = run.rows.narrow(0, kOffsets[t], kOffsets[t + 1] - kOffsets[t]);
    for (int64_t p = 0; p < 2; ++p) {
      const at::Tensor scores = at::mm(x, q[p].t());                           // [n, h]
      const at::Tensor values = at::mm(x, v[p].t()).view({x.size(0), 3, 2});  // [n, h, O]
      const at::Tensor best = scores.argmax(0);                                // [h]
      at::Tensor logit = bias[p].clone();
      for (int64_t j = 0; j < 3; ++j) logit = logit + values[best[j].item<int64_t>()][j];
      INFO("text " << t << " probe " << p);
      CHECK(at::allclose(run.saved.logits[t][p], logit.detach(), 1e-12, 1e-12));
      hard = hard + (logit * g[t][p]).sum();
      // The queries' surrogate: the same heads reading the softmax-weighted values.
      const at::Tensor a = at::softmax(scores, 0);
      soft = soft + ((a.unsqueeze(2) * values.detach()).sum(0).sum(0) * g[t][p]).sum();
    }
  }
  hard.backward();
  soft.backward();
  CHECK(at::allclose(run.bank.parameter_in(run.bank.gradients(), 1), v.grad(), 1e-10, 1e-12));
  CHECK(at::allclose(run.bank.parameter_in(run.bank.gradients(), 2), bias.grad(), 1e-10, 1e-12));
  CHECK(at::allclose(run.bank.parameter_in(run.bank.gradients(), 0), q.grad(), 1e-10, 1e-12));
  run.check_weights_sum_to_one();
  CHECK_FALSE(run.shape.kind->row_logits(run.bank, run.rows).defined());  // its tokens have no score of their own
}

TEST_CASE("multimax probes learn a marker token anywhere in a text") {
  TempDir tmp;
  BinaryTrainingOptions options;
  options.heads = 2;
  CHECK(marker_auroc(testing::marker_activations(tmp), "multimax", options) > 0.95);
}

TEST_CASE("a multimax probe's running maximum scores every prefix as the text cut there, scored whole, scores it") {
  for (const int64_t max_tokens : {0, 3}) {
    for (const int64_t skip : {0, 1}) {
      CAPTURE(max_tokens);
      CAPTURE(skip);
      ProbeShape shape = MonitorRun::small_shape("multimax", 2, 3);
      shape.max_tokens = max_tokens;
      shape.skip_leading = skip;
      ProbeBank bank(shape, 2, at::TensorOptions().dtype(at::kDouble));
      bank.values().copy_(at::randn_like(bank.values()));
      const at::Tensor rows = at::randn({kOffsets.back(), 5}, at::kDouble);
      std::vector<int64_t> counts;
      const TokenLayout prefixes = prefix_layout(kOffsets, shape, counts);
      const at::Tensor running = shape.kind->prefix_logits(bank, rows, prefixes);
      CHECK(at::allclose(running, shape.kind->ProbeKind::prefix_logits(bank, rows, prefixes), 1e-12, 1e-12));
      int64_t p = 0;
      for (size_t e = 0; e + 1 < kOffsets.size(); ++e) {
        const int64_t begin = kOffsets[e], end = kOffsets[e + 1], from = std::min(begin + skip, end - 1);
        CHECK(counts[e] == end - from);
        for (int64_t last = from; last < end; ++last, ++p) {
          INFO("text " << e << " cut after row " << last);
          const at::Tensor whole = token_logits(bank, rows, token_layout({begin, last + 1}, shape));
          CHECK(at::allclose(running[p], whole[0], 1e-12, 1e-12));
        }
      }
      CHECK(p == running.size(0));
    }
  }
}

TEST_CASE("monitor aggregates (what a monitor policy reads): token, max, ema and rolling equal their formulas over a stream of scores") {
  const std::vector<double> s = {0.2, 0.9, 0.1, 0.4, 0.8, 0.3, 0.05, 0.7};
  monitor::MonitorPolicy p;
  p.alpha = 0.3;
  p.window = 3;
  std::unique_ptr<monitor::RunningAggregate> token = monitor::find_aggregate("token")->make(p);
  std::unique_ptr<monitor::RunningAggregate> max = monitor::find_aggregate("max")->make(p);
  std::unique_ptr<monitor::RunningAggregate> ema = monitor::find_aggregate("ema")->make(p);
  std::unique_ptr<monitor::RunningAggregate> rolling = monitor::find_aggregate("rolling")->make(p);
  double e = s[0];
  for (size_t i = 0; i < s.size(); ++i) {
    CAPTURE(i);
    if (i > 0) e = 0.3 * s[i] + 0.7 * e;
    double window_sum = 0;
    const size_t first = i + 1 >= 3 ? i + 1 - 3 : 0;
    for (size_t j = first; j <= i; ++j) window_sum += s[j];
    CHECK(token->add(s[i]) == s[i]);
    CHECK(max->add(s[i]) == *std::max_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(i) + 1));
    CHECK(ema->add(s[i]) == doctest::Approx(e).epsilon(1e-12));
    CHECK(rolling->add(s[i]) == doctest::Approx(window_sum / static_cast<double>(i + 1 - first)).epsilon(1e-12));
  }
  CHECK(monitor::find_aggregate("median") == nullptr);
}
