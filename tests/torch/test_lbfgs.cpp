// The batched L-BFGS: separable quadratics of known minimum x_i = b_i / a_i, batched with different
// conditioning, each problem converging on its own exactly as it does alone; the iteration limit; and the
// binary logistic fit's gradient at its answer, computed independently here.
#include <doctest/doctest.h>

#include <cmath>

#include "probes/solvers/lbfgs.h"
#include "probes/solvers/logistic.h"

using namespace probekit::probes::solvers;

namespace {

// f_k(x) = sum_i a_ki x_i^2 / 2 - b_ki x_i, row by row: the minimum of row k is b_k / a_k. As a linear model:
// the scores are the parameters themselves, the loss the quadratic, no penalty.
struct Quadratics {
  at::Tensor a, b;  // [K, P]
  LinearModelObjective objective() const {
    LinearModelObjective o;
    o.scores = [](const at::Tensor& x, const at::Tensor&) { return x.clone(); };
    o.loss = [a = a, b = b](const at::Tensor& z, const at::Tensor& rows) {
      at::Tensor ar = a.index_select(0, rows), br = b.index_select(0, rows);
      return std::make_pair((0.5 * ar * z * z - br * z).sum(1), ar * z - br);
    };
    o.pullback = [](const at::Tensor& dz, const at::Tensor&) { return dz.clone(); };
    o.penalty = at::zeros({a.size(1)}, a.options());
    return o;
  }
};

// K problems of P = 20 parameters whose curvatures span 1 to `spread[k]`.
Quadratics quadratics(const std::vector<double>& spread) {
  std::vector<at::Tensor> a, b;
  for (size_t k = 0; k < spread.size(); ++k) {
    a.push_back(at::pow(spread[k], at::linspace(0.0, 1.0, 20, at::kDouble)));
    b.push_back(at::cos(at::arange(20, at::kDouble) * static_cast<double>(k + 1)));
  }
  return {at::stack(a), at::stack(b)};
}

}  // namespace

TEST_CASE("batched L-BFGS: each problem reaches its minimum on its own, as it does alone") {
  Quadratics batch = quadratics({1.0, 10.0, 1e4});
  LbfgsOptions options;
  options.gradient_tolerance = 1e-10;
  LbfgsResult together = minimize_lbfgs(batch.objective(), at::zeros({3, 20}, at::kDouble), options);
  at::Tensor exact = batch.b / batch.a;
  std::vector<int64_t> iterations;
  for (int64_t k = 0; k < 3; ++k) {
    const ProblemOutcome& o = together.problems[static_cast<size_t>(k)];
    double error = ((together.x[k] - exact[k]).abs().max() / exact[k].abs().max()).item<double>();
    INFO("problem " << k << ": " << o.iterations << " iterations, " << o.stop_reason << ", relative error " << error);
    CHECK(o.converged);
    CHECK(o.relative_gradient <= 1e-10);
    CHECK(error < 1e-8);
    iterations.push_back(o.iterations);
    // Alone, the same path: the rows never mix.
    Quadratics single{batch.a.narrow(0, k, 1), batch.b.narrow(0, k, 1)};
    LbfgsResult alone = minimize_lbfgs(single.objective(), at::zeros({1, 20}, at::kDouble), options);
    CHECK(alone.problems[0].iterations == o.iterations);
    CHECK(at::equal(alone.x[0], together.x[k]));
  }
  // The worse conditioned, the more iterations: the well-conditioned one stopped long before the others.
  CHECK(iterations[0] < iterations[2]);
  CHECK(iterations[0] <= 2);  // a multiple of the identity: one scaled step, then the exact one
}

TEST_CASE("batched L-BFGS stops at the iteration limit and says so") {
  LbfgsOptions options;
  options.max_iterations = 2;
  LbfgsResult result = minimize_lbfgs(quadratics({1e4}).objective(), at::zeros({1, 20}, at::kDouble), options);
  CHECK_FALSE(result.problems[0].converged);
  CHECK(result.problems[0].iterations == 2);
  CHECK(result.problems[0].stop_reason == "iteration limit");
}

TEST_CASE("the binary logistic fit zeroes the gradient of sum log(1 + exp(-y z)) + |w|^2 / 2C") {
  // 40 rows of 3 features, two labels that overlap; gradient written out independently of the solver's code.
  at::Tensor x = at::sin(at::arange(120, at::kDouble).view({40, 3}) * 0.7) * 2.0;
  at::Tensor t = (x.select(1, 0) + 0.5 * at::cos(at::arange(40, at::kDouble)) > 0).to(at::kDouble).unsqueeze(1);
  LbfgsOptions tight;
  tight.penalty_tolerance = 1e-10;  // the penalised fit's bound: the default's 1e-6 leaves gradients near 1e-6 here
  for (double C : {1.0, 0.1}) {
    LogisticFit fit = fit_binary_logistic({x, t, {}, C}, tight);
    REQUIRE(fit.problems[0].converged);
    at::Tensor w = fit.weight[0], b = fit.bias[0];
    at::Tensor p = at::sigmoid(at::mv(x, w) + b);  // [40]
    at::Tensor residual = p - t.select(1, 0);
    at::Tensor grad_w = at::mv(x.t(), residual) + w / C;
    double grad_b = residual.sum().item<double>();
    INFO("C " << C << ": weights " << w << ", bias " << b.item<double>());
    CHECK(grad_w.abs().max().item<double>() < 1e-6);
    CHECK(std::fabs(grad_b) < 1e-6);
  }
}

TEST_CASE("the logistic fit over float32 inputs (float32 products) agrees with the fit over float64 inputs") {
  // 300 rows of 40 features, 3 problems of different separations: the products' rounding stays far below the
  // solver's tolerance, and the problems that stop early leave the products of the others unchanged.
  at::Tensor x = at::sin(at::arange(12000, at::kDouble).view({300, 40}) * 0.37) * 1.5;
  at::Tensor score = x.narrow(1, 0, 3) + 0.3 * at::cos(at::arange(900, at::kDouble).view({300, 3}));
  at::Tensor t = (score > at::tensor({0.0, 0.5, -0.5}, at::kDouble)).to(at::kDouble);
  LogisticFit wide = fit_binary_logistic({x, t, {}, 1.0}, LbfgsOptions{});
  LogisticFit narrow = fit_binary_logistic({x.to(at::kFloat), t.to(at::kFloat), {}, 1.0}, LbfgsOptions{});
  REQUIRE(narrow.weight.dtype() == at::kDouble);
  for (int64_t k = 0; k < 3; ++k) {
    const ProblemOutcome& o = narrow.problems[static_cast<size_t>(k)];
    INFO("problem " << k << ": " << o.iterations << " iterations, " << o.stop_reason << ", gradient " << o.relative_gradient << " of its start, " << o.gradient_over_bound << " of its bound");
    CHECK(o.converged);
    double scale = wide.weight[k].abs().max().item<double>();
    CHECK((narrow.weight[k] - wide.weight[k]).abs().max().item<double>() < 1e-5 * scale);
    CHECK(std::fabs((narrow.bias[k] - wide.bias[k]).item<double>()) < 1e-5 * scale);
  }
}
