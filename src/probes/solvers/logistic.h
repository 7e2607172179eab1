// L2-regularised logistic regression as scikit-learn's LogisticRegression(penalty="l2", C, solver="lbfgs",
// fit_intercept=True) fits it: minimise sum_i s_i log(1 + exp(-y_i (w.x_i + b))) + ||w||^2 / (2C), the intercept
// not penalised (s_i: sample weights, 1 unless given). sklearn 1.2 minimises that sum; sklearn 1.4 and later
// divide the loss by sum_i s_i and the penalty's 1/C by it too. Any positive scale of the objective has the
// same minimiser; here it is divided by the number of rows, which keeps its values near 1 for the tolerance.
// Fitted by the batched L-BFGS (lbfgs.h) from zero, as sklearn, in double precision; the products over the
// inputs run in the inputs' dtype (float32 halves their time, and its rounding stays far below the tolerance
// that the equality with sklearn needs). The fitted weights and intercepts are double.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "probes/solvers/lbfgs.h"

namespace probekit::probes::solvers {

/// Sklearn leaves classes without a train example out of a multinomial fit; a probe keeps an output for every
/// label, so such a class gets weight 0 and this bias: the fit's limit is -infinity, and exp(-1e4) is 0 in
/// every float type, so its probability is exactly 0 wherever another class scores above -1e4.
constexpr double kAbsentClassBias = -1e4;

/// K one-vs-rest problems over shared inputs.
struct BinaryLogisticProblem {
  at::Tensor inputs;   // [N, H]
  at::Tensor targets;  // [N, K]: 1 for the problem's positives, 0 for the rest (inputs' dtype)
  at::Tensor weights;  // [N, K] sample weights, or undefined for all ones
  double C = 1.0;
};

/// Fitted weights and how each problem's solver ended.
struct LogisticFit {
  at::Tensor weight;  // [K, H] one-vs-rest; [classes, H] multinomial
  at::Tensor bias;    // [K]; [classes]
  std::vector<ProblemOutcome> problems;
};

/// Fits the K problems, each its own weights [H] and intercept.
LogisticFit fit_binary_logistic(const BinaryLogisticProblem& problem, const LbfgsOptions& options);

/// Fits K one-dimensional problems: problem k reads only column k of `problem.inputs` [N, K] (a projection per
/// problem), so its weight is one scale; weight [K, 1].
LogisticFit fit_scalar_logistic(const BinaryLogisticProblem& problem, const LbfgsOptions& options);

/// The multinomial fit of `classes` [N] (int64 in [0, class_count)) over `inputs` [N, H], as sklearn's default
/// for more than two classes with lbfgs: softmax cross-entropy + ||W||^2 / (2C) over every class's weights.
/// Classes without a train example are left out (kAbsentClassBias). Two classes are one binary problem, as
/// sklearn fits them, split into two opposite halves. One problem.
LogisticFit fit_multinomial_logistic(const at::Tensor& inputs, const at::Tensor& classes, int64_t class_count, double C,
                                     const LbfgsOptions& options);

}  // namespace probekit::probes::solvers
