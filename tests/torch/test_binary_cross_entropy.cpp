// The one-pass binary cross-entropy of the logistic fits: its e^x and log(1 + e) against the C library's over
// their whole domains, and the pass against the same loss in tensor operations, weighted and not, at logits
// from 0 to beyond the exponential's range.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "probes/solvers/binary_cross_entropy.h"

using namespace probekit::probes::solvers;

namespace {

double ulps(double value, double reference) {
  return std::fabs(value - reference) / (std::numeric_limits<double>::epsilon() * std::fabs(reference));
}

}  // namespace

TEST_CASE("e^x for x <= 0 and log(1 + e) for e in [0, 1] are within 2 ulp of the C library's") {
  double worst_exp = 0.0, worst_log1p = 0.0;
  for (double x = 0.0; x >= -708.0; x -= 0.00731) worst_exp = std::max(worst_exp, ulps(exp_nonpositive(x), std::exp(x)));
  for (double e = 1e-300; e <= 1.0; e = e < 1e-3 ? e * 1.7 : e + 1.37e-6) {
    worst_log1p = std::max(worst_log1p, ulps(log1p_unit(e), std::log1p(e)));
  }
  CHECK(worst_exp < 2.0);
  CHECK(worst_log1p < 2.0);
  CHECK(exp_nonpositive(0.0) == 1.0);
  CHECK(log1p_unit(0.0) == 0.0);
  CHECK(exp_nonpositive(-1e6) < 1e-307);  // clamped, not wrapped into a huge power
}

TEST_CASE("the one-pass cross-entropy matches the tensor operations' loss and derivative") {
  at::Tensor z = at::cat({at::linspace(-800.0, 800.0, 401, at::kDouble), at::tensor({0.0, -0.0, 1e-300, -1e-17}, at::kDouble),
                          at::sin(at::arange(600, at::kDouble)) * 30.0})
                     .view({5, 201});
  at::Tensor t = (at::cos(at::arange(1005, at::kDouble) * 1.3) > 0.2).to(at::kDouble).view({5, 201});
  at::Tensor w = 0.5 + at::rand({5, 201}, at::kDouble);
  const double scale = 1.0 / 201.0;
  for (bool weighted : {false, true}) {
    at::Tensor weights = weighted ? w : at::ones_like(z);
    at::Tensor per_row = (z.abs().neg().exp().log1p() + at::relu(z) - t * z) * weights;
    at::Tensor expected_loss = per_row.sum(1) * scale, expected_dz = (at::sigmoid(z) - t) * weights * scale;
    auto [loss, dz] = binary_cross_entropy_rows(z, t, weighted ? w : at::Tensor(), scale);
    INFO("weighted " << weighted);
    CHECK(((loss - expected_loss).abs() / expected_loss.abs()).max().item<double>() < 1e-14);
    CHECK((dz - expected_dz).abs().max().item<double>() < 1e-17);
  }
  CHECK_THROWS(binary_cross_entropy_rows(z.to(at::kFloat), t, {}, scale));
}
