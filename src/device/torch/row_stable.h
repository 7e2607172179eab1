// Products whose rows do not depend on the rows computed beside them, on every CPU. OpenBLAS picks its kernel at
// run time (OPENBLAS_CORETYPE, else the CPU): each kernel sums a row's products in an order that depends on where the
// row falls in its blocking (edge tiles, small-matrix and matrix-vector paths), so a stream decoded in a batch differed
// in the last bits from the same stream alone on some CPUs and not others. Here every fp32 output on the CPU is one
// fixed function of its input row and weight row: eight lanes of fused multiply-adds in k order (term k in lane
// k mod 8, so zeros appended change no bit), the lanes summed in one fixed tree, then the bias; AVX2 and the portable
// path compute the same bits. Other dtypes and devices take at::linear.
#pragma once

#include <ATen/ATen.h>

namespace probekit::device {

/// x [..., K] times weight [N, K] transposed, plus bias [N] when defined: at::linear's product to within rounding,
/// each output row a function of its input row alone (bitwise, for fp32 on the CPU).
at::Tensor row_stable_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

/// out [rows, cols] = x [rows, depth] times w [cols, depth] transposed (contiguous, no bias), on the calling thread:
/// each output the same fixed function of its two rows as row_stable_linear's (attention's scores use it).
void fixed_order_products(const float* x, int64_t rows, const float* w, int64_t cols, int64_t depth, float* out);

/// row_stable_linear on the portable path whatever the CPU: the bits the AVX2 path gives (tests check both).
at::Tensor row_stable_linear_portable(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

/// The sigmoid of each value, and the softmax over the last dimension: for fp32 on the CPU each output one fixed
/// function of its own value (its row's, for the softmax), computed in double and rounded once. ATen's vectorized
/// loops leave a tensor's last values (fewer than two vectors) to their scalar path, whose exp rounds apart, so a
/// text's probe score changed in its last bit with the number of texts scored beside it. Elsewhere ATen's.
at::Tensor row_stable_sigmoid(const at::Tensor& x);
at::Tensor row_stable_softmax(const at::Tensor& x);

/// Whether row_stable_linear's fixed-order kernel uses AVX2 here (the portable path gives the same bits, slower).
bool row_stable_uses_avx2();

}  // namespace probekit::device
