// The LibTorch side of the device layer on this machine's real runtime.
#include <doctest/doctest.h>

#include <ATen/Parallel.h>

#include "device/gpu_utils.h"
#include "fake_device_runtime.h"

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

TEST_CASE("select_compute on an injected Apple machine: MPS, fp32, its memory figures and its cache clearing") {
  probekit::testing::FakeDeviceRuntime mac = probekit::testing::apple_silicon_mac();
  ComputeTarget target = select_compute("auto", "fp16", mac);
  CHECK(target.device.is_mps());
  CHECK((target.dtype == at::kFloat));
  CHECK(target.dtype_choice.warning.find("not supported on MPS") != std::string::npos);
  CHECK(target.memory().working_set_bytes == mac.reading.working_set_bytes);
  MemoryBudget budget = memory_budget(target.choice.backend, target.memory(), 0, 1ll << 30);
  CHECK(budget.bytes == 13ull << 30);
  OutOfMemoryRetry retry{*target.device_runtime, {target.choice}};
  run_in_halves({0, 1}, [](const std::vector<int64_t>& part) {
    if (part.size() > 1) throw std::runtime_error(probekit::testing::kMpsOutOfMemory);
  }, retry);
  REQUIRE(mac.cleared.size() == 1);
  CHECK(mac.cleared.front() == Backend::kMps);
  // The real runtime of this machine has no MPS: asking for it names what there is.
  CHECK_THROWS_WITH(select_compute("mps", "auto"), doctest::Contains("Apple MPS is not available here; available: cpu"));
}
