#include "device/torch/row_stable.h"

namespace probekit::device {

namespace {

constexpr int64_t kPaddedRows = 64;
constexpr int64_t kSmallWeight = int64_t{1} << 21;

}  // namespace

at::Tensor row_stable_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const int64_t in = x.size(-1), rows = in == 0 ? 0 : x.numel() / in;
  if (!x.is_cpu() || weight.numel() >= kSmallWeight || rows == 0 || rows >= kPaddedRows) {
    return bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
  }
  at::Tensor padded = at::zeros({kPaddedRows, in}, x.options());
  padded.narrow(0, 0, rows).copy_(x.reshape({rows, in}));
  at::Tensor out = bias.defined() ? at::linear(padded, weight, bias) : at::linear(padded, weight);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.size(0);
  return out.narrow(0, 0, rows).reshape(shape);
}

}  // namespace probekit::device
