// The binary cross-entropy of logits, summed per problem, and its derivative, in one pass over the scores: the
// logistic fits' line searches evaluate it at every step they try, and as a chain of tensor operations (an
// exponential, a log1p and a sigmoid, each a pass of its own) it took a tenth of a fit.
//
// The pass needs e^x and log(1 + e) vectorised, which the C library's are not (without -ffast-math): so they are
// written here as polynomials within 2 ulp of the C library's, and the pass is compiled twice, for AVX2 with FMA
// (chosen at run time where the CPU has them) and for the baseline instruction set.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <utility>

namespace probekit::probes::solvers {

/// e^x for x <= 0 (x below -708 taken as -708: e^-708 is 3e-308, as a term of a loss or as a sigmoid within that of
/// the exact value).
inline double exp_nonpositive(double x) {
  constexpr double kShifter = 0x1.8p52;  // adding it leaves round(x / ln 2) in the low bits of the mantissa
  constexpr double kLog2e = 1.4426950408889634, kLn2High = 0x1.62e42fefa3800p-1, kLn2Low = 0x1.ef35793c7673p-45;
  x = x < -708.0 ? -708.0 : x;
  double shifted = x * kLog2e + kShifter;
  double n = shifted - kShifter;
  double r = (x - n * kLn2High) - n * kLn2Low;  // |r| <= ln 2 / 2: Taylor's series to r^13 is within 1e-17
  double p = 1.0 / 6227020800.0;
  for (double inverse_factorial : {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
                                   1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0}) {
    p = p * r + inverse_factorial;
  }
  uint64_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  uint64_t power_bits = (bits + 1023) << 52;  // 2^n: n + 1023 in the exponent field
  double power;
  std::memcpy(&power, &power_bits, sizeof power);
  return p * power;
}

/// log(1 + e) for e in [0, 1], as 2 atanh(s) with s = e / (2 + e), or ln 2 + 2 atanh((e - 1) / (e + 3)) above
/// sqrt 2 - 1, so |s| <= 0.172 and the series to s^23 is within 1e-17.
inline double log1p_unit(double e) {
  constexpr double kSqrt2Minus1 = 0.41421356237309503, kLn2 = 0.6931471805599453;
  bool high = e > kSqrt2Minus1;
  double s = (high ? e - 1.0 : e) / (high ? e + 3.0 : e + 2.0);
  double s2 = s * s;
  double p = 1.0 / 23.0;
  for (double odd : {21.0, 19.0, 17.0, 15.0, 13.0, 11.0, 9.0, 7.0, 5.0, 3.0}) p = p * s2 + 1.0 / odd;
  return (2.0 * s + 2.0 * s * s2 * p) + (high ? kLn2 : 0.0);
}

/// For logits z [K, N] (CPU, float64) and targets and weights [K, N] (weights undefined for all ones): each
/// row's scale * sum w (log(1 + e^z) - t z), [K], and its derivative scale * w (sigmoid(z) - t), [K, N].
std::pair<at::Tensor, at::Tensor> binary_cross_entropy_rows(const at::Tensor& z, const at::Tensor& targets,
                                                            const at::Tensor& weights, double scale);

}  // namespace probekit::probes::solvers
