#include "probes/solvers/logistic.h"

#include <fmt/ranges.h>

#include <cmath>

#include "common/error.h"

namespace probekit::probes::solvers {

namespace {

// The weighted binary cross-entropy of logits z [N, K] summed over rows, [K], and its gradient by z [N, K]:
// loss = s (log(1 + e^z) - t z), d loss / dz = s (sigmoid(z) - t); log(1 + e^z) = relu(z) + log1p(e^-|z|).
std::pair<at::Tensor, at::Tensor> binary_terms(const at::Tensor& z, const BinaryLogisticProblem& problem) {
  at::Tensor loss = at::relu(z) + at::log1p(at::exp(-z.abs())) - problem.targets * z;
  at::Tensor dz = at::sigmoid(z) - problem.targets;
  if (problem.weights.defined()) {
    loss = loss * problem.weights;
    dz = dz * problem.weights;
  }
  return {loss.sum(0), dz};
}

void check_problem(const BinaryLogisticProblem& p, bool one_column_per_problem) {
  if (p.inputs.dim() != 2 || p.targets.dim() != 2 || p.targets.size(0) != p.inputs.size(0)) {
    fail_input("logistic fit: inputs [{}] and targets [{}] do not match", fmt::join(p.inputs.sizes(), ", "),
               fmt::join(p.targets.sizes(), ", "));
  }
  if (one_column_per_problem && p.inputs.size(1) != p.targets.size(1)) {
    fail_input("logistic fit: {} projection columns for {} problems", p.inputs.size(1), p.targets.size(1));
  }
  if (p.weights.defined() && !p.weights.sizes().equals(p.targets.sizes())) {
    fail_input("logistic fit: sample weights [{}] for targets [{}]", fmt::join(p.weights.sizes(), ", "),
               fmt::join(p.targets.sizes(), ", "));
  }
  if (!(p.C > 0.0 && std::isfinite(p.C))) fail_usage("--C must be finite and positive, got {}", p.C);
}

LogisticFit split_weights(const LbfgsResult& result, int64_t features) {
  return {result.x.narrow(1, 0, features).contiguous(), result.x.select(1, features).contiguous(), result.problems};
}

}  // namespace

LogisticFit fit_binary_logistic(const BinaryLogisticProblem& problem, const LbfgsOptions& options) {
  check_problem(problem, false);
  const int64_t rows = problem.inputs.size(0), features = problem.inputs.size(1), k = problem.targets.size(1);
  const double scale = 1.0 / static_cast<double>(rows), penalty = 1.0 / (problem.C * static_cast<double>(rows));
  // x [K, H + 1]: each problem's weights, then its intercept.
  BatchedObjective objective = [&](const at::Tensor& x, at::Tensor& gradient) {
    at::Tensor w = x.narrow(1, 0, features), b = x.select(1, features);
    auto [loss, dz] = binary_terms(at::addmm(b, problem.inputs, w.t()), problem);
    gradient.narrow(1, 0, features).copy_(at::mm(dz.t(), problem.inputs) * scale + w * penalty);
    gradient.select(1, features).copy_(dz.sum(0) * scale);
    return loss * scale + (w * w).sum(1) * (0.5 * penalty);
  };
  return split_weights(minimize_lbfgs(objective, at::zeros({k, features + 1}, problem.inputs.options()), options),
                       features);
}

LogisticFit fit_scalar_logistic(const BinaryLogisticProblem& problem, const LbfgsOptions& options) {
  check_problem(problem, true);
  const int64_t rows = problem.inputs.size(0), k = problem.targets.size(1);
  const double scale = 1.0 / static_cast<double>(rows), penalty = 1.0 / (problem.C * static_cast<double>(rows));
  // x [K, 2]: each problem's scale a and intercept b; its logits are a p + b for its projections p.
  BatchedObjective objective = [&](const at::Tensor& x, at::Tensor& gradient) {
    at::Tensor a = x.select(1, 0), b = x.select(1, 1);
    auto [loss, dz] = binary_terms(problem.inputs * a + b, problem);
    gradient.select(1, 0).copy_((dz * problem.inputs).sum(0) * scale + a * penalty);
    gradient.select(1, 1).copy_(dz.sum(0) * scale);
    return loss * scale + a * a * (0.5 * penalty);
  };
  return split_weights(minimize_lbfgs(objective, at::zeros({k, 2}, problem.inputs.options()), options), 1);
}

LogisticFit fit_multinomial_logistic(const at::Tensor& inputs, const at::Tensor& classes, int64_t class_count, double C,
                                     const LbfgsOptions& options) {
  if (!(C > 0.0 && std::isfinite(C))) fail_usage("--C must be finite and positive, got {}", C);
  const int64_t rows = inputs.size(0), features = inputs.size(1);
  at::Tensor present = at::bincount(classes, {}, class_count).gt(0).nonzero().flatten();  // the classes fitted
  at::Tensor position = at::full({class_count}, -1, classes.options());
  position.index_put_({present}, at::arange(present.size(0), classes.options()));
  at::Tensor targets = position.index_select(0, classes);  // [N] in 0..present-1
  const int64_t fitted = present.size(0);
  const double scale = 1.0 / static_cast<double>(rows), penalty = 1.0 / (C * static_cast<double>(rows));
  // One problem: x [1, fitted * (H + 1)], viewed as each fitted class's weights then its intercept.
  BatchedObjective objective = [&](const at::Tensor& x, at::Tensor& gradient) {
    at::Tensor all = x.view({fitted, features + 1});
    at::Tensor w = all.narrow(1, 0, features), b = all.select(1, features);
    at::Tensor log_probs = at::log_softmax(at::addmm(b, inputs, w.t()), 1);  // [N, fitted]
    at::Tensor loss = -log_probs.gather(1, targets.unsqueeze(1)).sum();
    at::Tensor dz = log_probs.exp();
    dz.scatter_add_(1, targets.unsqueeze(1), at::full({rows, 1}, -1.0, dz.options()));
    at::Tensor g = gradient.view({fitted, features + 1});
    g.narrow(1, 0, features).copy_(at::mm(dz.t(), inputs) * scale + w * penalty);
    g.select(1, features).copy_(dz.sum(0) * scale);
    return (loss * scale + (w * w).sum() * (0.5 * penalty)).view({1});
  };
  at::Tensor solved;
  std::vector<ProblemOutcome> problems;
  if (fitted == 2) {
    // sklearn fits two classes as one binary problem (w, b) for the second; rows -(w, b)/2 and (w, b)/2 give the
    // same probabilities under the softmax.
    LogisticFit binary = fit_binary_logistic({inputs, targets.eq(1).to(inputs.scalar_type()).unsqueeze(1), {}, C}, options);
    at::Tensor half = at::cat({binary.weight, binary.bias.unsqueeze(1)}, 1) / 2.0;  // [1, H + 1]
    solved = at::cat({-half, half});
    problems = binary.problems;
  } else {
    LbfgsResult result = minimize_lbfgs(objective, at::zeros({1, fitted * (features + 1)}, inputs.options()), options);
    solved = result.x.view({fitted, features + 1});
    problems = result.problems;
  }
  LogisticFit fit{at::zeros({class_count, features}, inputs.options()),
                  at::full({class_count}, kAbsentClassBias, inputs.options()), problems};
  fit.weight.index_copy_(0, present, solved.narrow(1, 0, features));
  // The intercepts are fixed only up to a common shift; from zero L-BFGS keeps their sum at 0, as sklearn's.
  at::Tensor intercepts = solved.select(1, features);
  fit.bias.index_copy_(0, present, intercepts - intercepts.mean());
  return fit;
}

}  // namespace probekit::probes::solvers
