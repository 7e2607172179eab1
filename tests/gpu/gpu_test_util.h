// Helpers shared by the GPU tests.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>

namespace probekit::testing {

/// max |a - b| / max |b|, in doubles on the host; a and b may lie on different devices.
inline double max_relative_error(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor x = a.to(at::kCPU).to(at::kDouble), y = b.to(at::kCPU).to(at::kDouble);
  return (x - y).abs().max().item<double>() / std::max(1e-30, y.abs().max().item<double>());
}

}  // namespace probekit::testing
