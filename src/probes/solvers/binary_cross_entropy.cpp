#include "probes/solvers/binary_cross_entropy.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"

namespace probekit::probes::solvers {

namespace {

// One row: the sum of w (softplus(z) - t z), and scale * w (sigmoid(z) - t) into dz; w null for ones. Written
// without branches (selects only) so that it vectorises.
inline double row_terms(const double* z, const double* t, const double* w, double* dz, int64_t n, double scale) {
  double loss = 0.0;
#pragma omp simd reduction(+ : loss)
  for (int64_t i = 0; i < n; ++i) {
    double v = z[i], weight = w != nullptr ? w[i] : 1.0;
    double e = exp_nonpositive(v < 0.0 ? v : -v);  // e^-|z|
    double softplus = (v > 0.0 ? v : 0.0) + log1p_unit(e);
    double sigmoid = (v >= 0.0 ? 1.0 : e) / (1.0 + e);
    loss += weight * (softplus - t[i] * v);
    dz[i] = scale * weight * (sigmoid - t[i]);
  }
  return loss * scale;
}

double row_terms_baseline(const double* z, const double* t, const double* w, double* dz, int64_t n, double scale) {
  return row_terms(z, t, w, dz, n, scale);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) double row_terms_avx2(const double* z, const double* t, const double* w, double* dz,
                                                           int64_t n, double scale) {
  return row_terms(z, t, w, dz, n, scale);
}

using RowTerms = double (*)(const double*, const double*, const double*, double*, int64_t, double);

RowTerms pick_row_terms() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? row_terms_avx2 : row_terms_baseline;
}
#else
using RowTerms = double (*)(const double*, const double*, const double*, double*, int64_t, double);

RowTerms pick_row_terms() { return row_terms_baseline; }
#endif

}  // namespace

std::pair<at::Tensor, at::Tensor> binary_cross_entropy_rows(const at::Tensor& z, const at::Tensor& targets,
                                                            const at::Tensor& weights, double scale) {
  const bool weights_fit = !weights.defined() || (weights.is_cpu() && weights.sizes().equals(z.sizes()));
  if (!z.is_cpu() || z.scalar_type() != at::kDouble || z.dim() != 2 || !targets.is_cpu() ||
      !targets.sizes().equals(z.sizes()) || !weights_fit) {
    fail_input("binary cross-entropy: logits [{}] ({}, {}) need to be a float64 matrix on the CPU, with targets [{}] and "
               "weights [{}] of its shape there",
               fmt::join(z.sizes(), ", "), z.device().str(), c10::toString(z.scalar_type()), fmt::join(targets.sizes(), ", "),
               weights.defined() ? fmt::format("{}", fmt::join(weights.sizes(), ", ")) : std::string("none"));
  }
  static const RowTerms kRowTerms = pick_row_terms();
  at::Tensor logits = z.contiguous(), t = targets.to(at::kDouble).contiguous();
  at::Tensor w = weights.defined() ? weights.to(at::kDouble).contiguous() : at::Tensor();
  const int64_t problems = z.size(0), n = z.size(1);
  at::Tensor loss = at::empty({problems}, logits.options()), dz = at::empty_like(logits);
  at::parallel_for(0, problems, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      loss.data_ptr<double>()[k] =
          kRowTerms(logits.data_ptr<double>() + k * n, t.data_ptr<double>() + k * n,
                    w.defined() ? w.data_ptr<double>() + k * n : nullptr, dz.data_ptr<double>() + k * n, n, scale);
    }
  });
  return {loss, dz};
}

}  // namespace probekit::probes::solvers
