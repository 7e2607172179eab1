// The LibTorch side of the device layer on this machine's real runtime.
#include <doctest/doctest.h>

#include <ATen/Parallel.h>

#include "device/gpu_utils.h"

using namespace probekit::device;

TEST_CASE("select_compute on the CPU gives fp32 and a usable device") {
  ComputeTarget target = select_compute("cpu", "auto");
  CHECK(target.device.is_cpu());
  CHECK((target.dtype == at::kFloat));
  at::Tensor x = at::ones({2, 2}, at::TensorOptions().device(target.device).dtype(target.dtype));
  synchronize(target.device);
  empty_cache(target.device);
  CHECK(x.sum().item<float>() == 4.0f);
}

TEST_CASE("configure_threads sets LibTorch's thread count") {
  CHECK(configure_threads(1) == 1);
  CHECK(at::get_num_threads() == 1);
  int all = configure_threads(0);
  CHECK(all == available_cores());
  CHECK(at::get_num_threads() == all);
}

TEST_CASE("bf16 matrix products run on this CPU (regression: oneDNN 2.x's AMX kernels crashed with SIGILL)") {
  // Shapes of the model runtime's projections: [tokens, hidden] x [hidden, out]^T, and batched attention scores.
  at::Tensor x = at::ones({7, 96}, at::kBFloat16);
  at::Tensor w = at::full({40, 96}, 0.5, at::kBFloat16);
  at::Tensor y = at::matmul(x, w.t());
  CHECK(y.sizes() == at::IntArrayRef({7, 40}));
  CHECK(y.to(at::kFloat).min().item<float>() == 48.0f);  // 96 x 1 x 0.5
  at::Tensor scores = at::matmul(at::ones({2, 4, 9, 32}, at::kBFloat16), at::ones({2, 4, 32, 9}, at::kBFloat16));
  CHECK(scores.to(at::kFloat).max().item<float>() == 32.0f);
}
