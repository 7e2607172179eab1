// Full-batch L-BFGS over a batch of K independent smooth convex problems of P parameters each, minimised
// together: the K one-vs-rest probes share their matrix products, while each problem keeps its own history,
// step length and convergence, and stops on its own (its parameters then stay exactly as they were; the
// products then cover only the problems still running).
//
// The objectives are those of linear models: f_k(x) = loss_k(Z x) + sum_j penalty_j x_j^2 / 2, a loss of
// scores linear in the parameters. Along a search direction d the scores move by Z d, so each iteration costs
// two products over the inputs (Z d, and the gradient's Z^T at the new point), and the line search runs on
// the scores alone, however many steps it tries.
//
// The search direction is the two-loop recursion over the last `history` pairs (Nocedal and Wright, algorithm
// 7.4) with the initial Hessian scaled by s.y / y.y. The step satisfies the strong Wolfe conditions (Armijo's
// sufficient decrease, and a directional derivative shrunk to within 0.9 of the start's), found by doubling
// and bisection, as scipy's L-BFGS-B (sklearn's solver) asks of its steps; once the decrease of the objective
// is lost in its rounding near the minimum, the curvature condition alone, which the derivative can still tell.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"

namespace probekit::probes::solvers {

struct LbfgsOptions {
  int64_t max_iterations = 10000;
  int64_t history = 10;
  /// Without a penalty, a problem has converged when the 2-norm of its gradient is at most this fraction of its
  /// norm at the start.
  double gradient_tolerance = 3e-7;
  /// With a penalty (mu its smallest positive value), a problem has converged when the 2-norm of its gradient is at
  /// most penalty_tolerance x mu x its largest |parameter|: f is mu-strongly convex in the penalised parameters, so
  /// they are then within penalty_tolerance x that largest value of the optimum, whatever the data's scale (a rule
  /// relative to the first gradient stopped 6e-3 short of it on rows with a large common offset); never below the
  /// products' rounding (LinearModelObjective::rounding).
  double penalty_tolerance = 1e-6;
};

/// K problems f_k(x) = loss_k(Z x) + sum_j penalty_j x_j^2 / 2. Each function is given the problems it covers,
/// `rows` (int64 [K']), beside their rows of parameters or scores; row k of a result depends on row k of the
/// arguments only.
struct LinearModelObjective {
  /// The scores [K', M] of parameter rows x [K', P]: linear in x (no constant term).
  std::function<at::Tensor(const at::Tensor& x, const at::Tensor& rows)> scores;
  /// The losses [K'] at scores z [K', M] and their derivatives by the scores [K', M].
  std::function<std::pair<at::Tensor, at::Tensor>(const at::Tensor& z, const at::Tensor& rows)> loss;
  /// Z^T dz: the loss's gradient by the parameters [K', P] from its derivative by the scores dz [K', M], a new
  /// tensor (the solver adds the penalty's gradient to it in place).
  std::function<at::Tensor(const at::Tensor& dz, const at::Tensor& rows)> pullback;
  at::Tensor penalty;  // [P]
  /// How finely the products let the gradient be known, as a fraction of its norm at the start (logistic.cpp: an
  /// eighth of their dtype's epsilon): no bound asks for less.
  double rounding = 0.0;
};

/// How one problem ended.
struct ProblemOutcome {
  int64_t iterations = 0;
  double objective = 0.0;
  double relative_gradient = 0.0;  // its gradient norm at the end over its norm at the start
  double gradient_over_bound = 0.0;  // its gradient norm at the end over the bound: <= 1 when converged at the
                                     // tolerance, up to 8 at the rounding limit, more when it stopped otherwise
  bool converged = false;
  /// "gradient tolerance", "rounding limit" (no further decrease with the gradient within the products' epsilon:
  /// converged), "no further decrease" or "iteration limit"
  std::string stop_reason;
};

/// How a problem ended, as the metrics and history files record it ("solver").
Json outcome_json(const ProblemOutcome& outcome);

struct LbfgsResult {
  at::Tensor x;  // [K, P]
  std::vector<ProblemOutcome> problems;
};

/// Minimises the K problems from `start` [K, P] (double precision advised: the tolerance is tight; the scores
/// and pullbacks may compute in a narrower type and return the start's).
LbfgsResult minimize_lbfgs(const LinearModelObjective& objective, const at::Tensor& start, const LbfgsOptions& options);

}  // namespace probekit::probes::solvers
