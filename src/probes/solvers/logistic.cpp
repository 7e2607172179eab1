#include "probes/solvers/logistic.h"

#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "common/error.h"
#include "probes/solvers/binary_cross_entropy.h"
#include "probes/solvers/row_block_products.h"

namespace probekit::probes::solvers {

namespace {

// The weighted binary cross-entropy of logits z [K', N] summed over each problem's rows (times `scale`), [K'],
// and its derivative by z: loss = s (log(1 + e^z) - t z), d loss / dz = s (sigmoid(z) - t), where
// log(1 + e^z) = relu(z) + log1p(e^-|z|). `targets` and `weights` [K', N]; weights undefined for all ones.
// On the CPU in double precision it is one pass (binary_cross_entropy_rows), elsewhere tensor operations.
std::pair<at::Tensor, at::Tensor> binary_terms(const at::Tensor& z, const at::Tensor& targets, const at::Tensor& weights,
                                               double scale) {
  if (z.is_cpu() && z.scalar_type() == at::kDouble) return binary_cross_entropy_rows(z, targets, weights, scale);
  at::Tensor loss = z.abs().neg_().exp_().log1p_().add_(at::relu(z)).addcmul_(targets, z, -1.0);
  at::Tensor dz = at::sigmoid(z).sub_(targets);
  if (weights.defined()) {
    loss.mul_(weights);
    dz.mul_(weights);
  }
  return {loss.sum(1).mul_(scale), dz.mul_(scale)};
}

// The penalty of `groups` blocks of `features` weights and an intercept, the intercepts unpenalised: [groups * (features + 1)].
at::Tensor weight_penalty(int64_t groups, int64_t features, double value, at::TensorOptions options) {
  at::Tensor penalty = at::full({groups, features + 1}, value, options);
  penalty.select(1, features).zero_();
  return penalty.flatten();
}

// A problem's rows of [N, K] per-row values as [K, N] solver values, or undefined where `values` is.
at::Tensor per_problem(const at::Tensor& values) {
  return values.defined() ? values.t().to(at::kDouble).contiguous() : at::Tensor();
}

// The binary fits' loss over the problems' rows of `targets` and `weights` ([K, N] solver values; weights undefined
// for all ones), as LinearModelObjective::loss.
decltype(LinearModelObjective::loss) binary_loss(at::Tensor targets, at::Tensor weights, double scale) {
  return [=](const at::Tensor& z, const at::Tensor& rows) {
    auto pick = [&](const at::Tensor& v) {
      return !v.defined() || rows.numel() == v.size(0) ? v : v.index_select(0, rows);  // all rows: no copy
    };
    return binary_terms(z, pick(targets), pick(weights), scale);
  };
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

// How finely the gradient is known through products over `inputs` (RowBlockProducts multiplies in their dtype), as a
// fraction of its first norm: an eighth of the dtype's epsilon. (float32 fits stalled near 0.025 epsilon at the
// least; a whole epsilon stopped one label of the fixture's hard rows 1e-4 from the optimum.)
double products_rounding(const at::Tensor& inputs) {
  switch (inputs.scalar_type()) {
    case at::kDouble: return std::numeric_limits<double>::epsilon() / 8;
    case at::kHalf: return std::ldexp(1.0, -13);
    case at::kBFloat16: return std::ldexp(1.0, -10);
    default: return std::numeric_limits<float>::epsilon() / 8;
  }
}

// Rows [N, H] less their column means (rounded to the rows' dtype), and those means [H] in double. The fits run on
// centred rows: the weights' minimiser is the same (each intercept absorbs w . means, given back by
// uncentred_intercepts), but the intercept no longer moves with a large common offset of the rows, along which
// L-BFGS crept towards the optimum.
std::pair<at::Tensor, at::Tensor> centred_rows(const at::Tensor& inputs) {
  at::Tensor means = at::mean(inputs, {0}, false, at::kDouble).to(inputs.scalar_type());
  return {inputs - means, means.to(at::kDouble)};
}

// The intercepts [K] of uncentred rows from those of rows less `means`: b - w . means for weights [K, H].
at::Tensor uncentred_intercepts(const at::Tensor& intercepts, const at::Tensor& weights, const at::Tensor& means) {
  return intercepts - at::mv(weights.to(at::kDouble), means);
}

// The softmax cross-entropy of `classes` [N] (in 0..fitted-1) as one problem: x [1, fitted * (H + 1)], viewed
// as each class's weights then its intercept; its scores are the logits [fitted, N], flattened to [1, fitted * N].
LinearModelObjective multinomial_objective(const at::Tensor& inputs, const at::Tensor& classes, int64_t fitted, double C) {
  const int64_t rows = inputs.size(0), features = inputs.size(1);
  const double scale = 1.0 / static_cast<double>(rows);
  const RowBlockProducts products(inputs);
  at::Tensor targets = classes.unsqueeze(0);
  LinearModelObjective objective;
  objective.scores = [=](const at::Tensor& x, const at::Tensor&) {
    at::Tensor all = x.reshape({fitted, features + 1});
    at::Tensor logits = products.times_rows(all.narrow(1, 0, features)).to(at::kDouble).add_(all.narrow(1, features, 1));
    return logits.reshape({1, fitted * rows});
  };
  objective.loss = [=](const at::Tensor& z, const at::Tensor&) {
    at::Tensor log_probs = at::log_softmax(z.reshape({fitted, rows}), 0);
    at::Tensor loss = -log_probs.gather(0, targets).sum() * scale;
    at::Tensor dz = log_probs.exp();
    dz.scatter_add_(0, targets, at::full({1, rows}, -1.0, dz.options()));
    return std::make_pair(loss.view({1}), (dz * scale).reshape({1, fitted * rows}));
  };
  objective.pullback = [=](const at::Tensor& dz, const at::Tensor&) {
    at::Tensor per_class = dz.reshape({fitted, rows});
    at::Tensor weights = products.over_rows(per_class).to(at::kDouble);
    return at::cat({weights, per_class.sum(1, true)}, 1).reshape({1, fitted * (features + 1)});
  };
  objective.penalty =
      weight_penalty(fitted, features, 1.0 / (C * static_cast<double>(rows)), inputs.options().dtype(at::kDouble));
  objective.rounding = products_rounding(inputs);
  return objective;
}

}  // namespace

LogisticFit fit_binary_logistic(const BinaryLogisticProblem& problem, const LbfgsOptions& options) {
  check_problem(problem, false);
  const int64_t rows = problem.inputs.size(0), features = problem.inputs.size(1), k = problem.targets.size(1);
  const double scale = 1.0 / static_cast<double>(rows), penalty = 1.0 / (problem.C * static_cast<double>(rows));
  const at::TensorOptions solver = problem.inputs.options().dtype(at::kDouble);
  const auto [centred, means] = centred_rows(problem.inputs);
  const RowBlockProducts products(centred);
  // x [K, H + 1]: each problem's weights, then its intercept; its scores are its logits over the rows [N],
  // the products in the inputs' dtype.
  LinearModelObjective objective;
  objective.scores = [&](const at::Tensor& x, const at::Tensor&) {
    return products.times_rows(x.narrow(1, 0, features)).to(at::kDouble).add_(x.narrow(1, features, 1));
  };
  objective.loss = binary_loss(per_problem(problem.targets), per_problem(problem.weights), scale);
  objective.pullback = [&](const at::Tensor& dz, const at::Tensor&) {
    return at::cat({products.over_rows(dz).to(at::kDouble), dz.sum(1, true)}, 1);
  };
  objective.penalty = weight_penalty(1, features, penalty, solver);
  objective.rounding = products_rounding(problem.inputs);
  LogisticFit fit = split_weights(minimize_lbfgs(objective, at::zeros({k, features + 1}, solver), options), features);
  fit.bias = uncentred_intercepts(fit.bias, fit.weight, means);
  return fit;
}

LogisticFit fit_scalar_logistic(const BinaryLogisticProblem& problem, const LbfgsOptions& options) {
  check_problem(problem, true);
  const int64_t rows = problem.inputs.size(0), k = problem.targets.size(1);
  const double scale = 1.0 / static_cast<double>(rows), penalty = 1.0 / (problem.C * static_cast<double>(rows));
  const at::TensorOptions solver = problem.inputs.options().dtype(at::kDouble);
  at::Tensor projections = per_problem(problem.inputs);
  const at::Tensor means = projections.mean(1);  // [K]: each problem's projections centred, as centred_rows does
  projections = projections - means.unsqueeze(1);
  // x [K, 2]: each problem's scale a and intercept b; its logits are a p + b for its projections p.
  LinearModelObjective objective;
  objective.scores = [&](const at::Tensor& x, const at::Tensor& r) {
    return x.narrow(1, 0, 1) * projections.index_select(0, r) + x.narrow(1, 1, 1);
  };
  objective.loss = binary_loss(per_problem(problem.targets), per_problem(problem.weights), scale);
  objective.pullback = [&](const at::Tensor& dz, const at::Tensor& r) {
    return at::cat({(dz * projections.index_select(0, r)).sum(1, true), dz.sum(1, true)}, 1);
  };
  objective.penalty = weight_penalty(1, 1, penalty, solver);
  objective.rounding = std::numeric_limits<double>::epsilon() / 8;  // its products are of float64 projections
  LogisticFit fit = split_weights(minimize_lbfgs(objective, at::zeros({k, 2}, solver), options), 1);
  fit.bias = fit.bias - fit.weight.select(1, 0) * means;
  return fit;
}

LogisticFit fit_multinomial_logistic(const at::Tensor& inputs, const at::Tensor& classes, int64_t class_count, double C,
                                     const LbfgsOptions& options) {
  if (!(C > 0.0 && std::isfinite(C))) fail_usage("--C must be finite and positive, got {}", C);
  const int64_t features = inputs.size(1);
  at::Tensor present = at::bincount(classes, {}, class_count).gt(0).nonzero().flatten();  // the classes fitted
  at::Tensor position = at::full({class_count}, -1, classes.options());
  position.index_put_({present}, at::arange(present.size(0), classes.options()));
  at::Tensor targets = position.index_select(0, classes);  // [N] in 0..present-1
  const int64_t fitted = present.size(0);
  const at::TensorOptions solver = inputs.options().dtype(at::kDouble);
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
    const auto [centred, means] = centred_rows(inputs);
    LbfgsResult result = minimize_lbfgs(multinomial_objective(centred, targets, fitted, C),
                                        at::zeros({1, fitted * (features + 1)}, solver), options);
    solved = result.x.view({fitted, features + 1}).clone();
    solved.select(1, features).copy_(uncentred_intercepts(solved.select(1, features), solved.narrow(1, 0, features), means));
    problems = result.problems;
  }
  LogisticFit fit{at::zeros({class_count, features}, solver), at::full({class_count}, kAbsentClassBias, solver),
                  problems};
  fit.weight.index_copy_(0, present, solved.narrow(1, 0, features));
  // The intercepts are fixed only up to a common shift; from zero L-BFGS keeps their sum at 0, as sklearn's.
  at::Tensor intercepts = solved.select(1, features);
  fit.bias.index_copy_(0, present, intercepts - intercepts.mean());
  return fit;
}

}  // namespace probekit::probes::solvers
