// Products whose rows do not depend on the rows computed beside them, on the CPU too. OpenBLAS sums a few rows'
// products with a small weight in another order than the same rows among many (its small-matrix and matrix-vector
// kernels): a stream decoded in a batch then differed in the last bits from the same stream alone. Padding such
// products to 64 rows takes the general kernel, whose rows are independent (checked from 1 to 200 rows on weights
// of 16 x 16 to 2,560 x 4,096); weights of 2^21 elements and more take it at any row count, unpadded.
#pragma once

#include <ATen/ATen.h>

namespace probekit::device {

/// x [..., K] times weight [N, K] transposed, plus bias [N] when defined: at::linear's numbers, row-independent.
at::Tensor row_stable_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

}  // namespace probekit::device
