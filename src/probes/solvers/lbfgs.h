// Full-batch L-BFGS over a batch of K independent smooth convex problems of P parameters each, minimised
// together: one objective call evaluates all K (the K one-vs-rest probes share their matrix products), while
// each problem keeps its own history, step length and convergence, and stops on its own (its parameters then
// stay exactly as they were). The probe kinds that fit by their own solver (logistic, mean-diff) run on it.
//
// The search direction is the two-loop recursion over the last `history` pairs (Nocedal and Wright, algorithm
// 7.4) with the initial Hessian scaled by s.y / y.y. The step is the first of 1, 1/2, 1/4, ... that satisfies
// Armijo's condition, or, once the decrease of the objective is lost in its rounding near the minimum, a step
// whose directional derivative has shrunk to within 0.9 of the start's (the strong Wolfe curvature condition,
// which the gradient, unlike the objective, can still tell). For a convex objective either is a sound step.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/json.h"

namespace probekit::probes::solvers {

struct LbfgsOptions {
  int64_t max_iterations = 10000;
  int64_t history = 10;
  /// A problem has converged when the 2-norm of its gradient is at most this fraction of its norm at the start.
  double gradient_tolerance = 1e-8;
};

/// The objectives of K problems at `x` [K, P]: returns their values [K] and writes their gradients into
/// `gradient` [K, P]. Rows are independent: row k of the results depends on row k of x only.
using BatchedObjective = std::function<at::Tensor(const at::Tensor& x, at::Tensor& gradient)>;

/// How one problem ended.
struct ProblemOutcome {
  int64_t iterations = 0;
  double objective = 0.0;
  double relative_gradient = 0.0;  // its gradient norm at the end over its norm at the start
  bool converged = false;
  std::string stop_reason;  // "gradient tolerance", "iteration limit" or "no further decrease"
};

/// How a problem ended, as the metrics and history files record it ("solver").
Json outcome_json(const ProblemOutcome& outcome);

struct LbfgsResult {
  at::Tensor x;  // [K, P]
  std::vector<ProblemOutcome> problems;
};

/// Minimises the K problems from `start` [K, P] (double precision advised: the tolerance is tight).
LbfgsResult minimize_lbfgs(const BatchedObjective& objective, const at::Tensor& start, const LbfgsOptions& options);

}  // namespace probekit::probes::solvers
