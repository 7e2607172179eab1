// The LibTorch side of the device layer on this machine's real runtime.
#include <doctest/doctest.h>

#include <ATen/Parallel.h>

#include <cmath>

#include "device/torch/gpu_utils.h"
#include "device/torch/row_stable.h"
#include "device/torch/transfers.h"
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

TEST_CASE("PinnedPool hands a buffer back once its tensor and views are gone, and reuses the smallest that fits") {
  PinnedPool pool;
  void* first = nullptr;
  {
    at::Tensor rows = pool.take({4, 3, 8}, at::kFloat);
    CHECK((rows.sizes() == at::IntArrayRef{4, 3, 8}));
    CHECK((rows.scalar_type() == at::kFloat));
    rows.fill_(2.0f);
    CHECK(rows.sum().item<float>() == 192.0f);
    first = rows.data_ptr();
    at::Tensor view = rows[1];
    rows = at::Tensor();
    // The view still holds the buffer: another request gets a new one.
    at::Tensor other = pool.take({4, 3, 8}, at::kFloat);
    CHECK(other.data_ptr() != first);
    CHECK(pool.buffers() == 2);
  }
  // Both are back; a smaller request reuses one of them rather than making a third.
  at::Tensor smaller = pool.take({2, 8}, at::kFloat);
  CHECK(pool.buffers() == 2);
  // A request larger than every buffer makes one of its size.
  at::Tensor larger = pool.take({1000}, at::kDouble);
  CHECK(pool.buffers() == 3);
  larger = at::Tensor();
  smaller = at::Tensor();
  // The smallest free buffer that fits is the one taken: 96 floats' worth, not the 8,000-byte one.
  at::Tensor again = pool.take({96}, at::kFloat);
  CHECK(pool.buffers() == 3);
  at::Tensor big = pool.take({8000}, at::kByte);
  CHECK(pool.buffers() == 3);

  PinnedPool reserved;
  reserved.reserve(1024, 2);
  CHECK(reserved.buffers() == 2);
  at::Tensor a = reserved.take({256}, at::kFloat), b = reserved.take({16, 16}, at::kFloat);
  CHECK(a.data_ptr() != b.data_ptr());
  CHECK(reserved.buffers() == 2);
}

// Exact on every kernel, by construction: each fp32 output on the CPU is one fixed function of its input row and weight
// row (row_stable.h), so neither the rows beside it, nor OpenBLAS's kernel (OPENBLAS_CORETYPE), nor the thread count
// change its bits; the AVX2 and portable paths compute the same function. .ci/run runs this under a second kernel.
TEST_CASE("row_stable_linear: each row's product is the same alone and among any number of rows" * doctest::test_suite("numeric")) {
  at::manual_seed(0);
  const int threads = at::get_num_threads();
  for (const auto& shape : std::vector<std::pair<int64_t, int64_t>>{{64, 128}, {192, 64}, {256, 256}, {256, 2048}, {45, 37}, {7, 3}}) {
    const int64_t out = shape.first, in = shape.second;
    at::Tensor weight = at::randn({out, in}), bias = at::randn({out}), x = at::randn({100, in});
    const at::Tensor all = row_stable_linear(x, weight, bias);
    CHECK(all.sizes() == at::IntArrayRef({100, out}));
    // Within the rounding any order of the sums allows: each side is within K u sum |x_k w_k| (+ u |y| for the bias)
    // of the exact product, u = 2^-24.
    const double u = std::ldexp(1.0, -24);
    const at::Tensor bound = (2 * (in + 1) * u) * (at::linear(x.abs(), weight.abs(), bias.abs()));
    CHECK(((all - at::linear(x, weight, bias)).abs() <= bound).all().item<bool>());
    CHECK(at::equal(row_stable_linear_portable(x, weight, bias), all));
    for (int64_t rows : {1, 2, 4, 13, 26, 63, 64, 70, 99}) {
      CAPTURE(out);
      CAPTURE(rows);
      CHECK(at::equal(row_stable_linear(x.narrow(0, 0, rows), weight, bias), all.narrow(0, 0, rows)));
      CHECK(at::equal(row_stable_linear(x.narrow(0, 100 - rows, rows), weight, bias), all.narrow(0, 100 - rows, rows)));
      // Leading dimensions are kept: [1, rows, in] -> [1, rows, out].
      CHECK(at::equal(row_stable_linear(x.narrow(0, 0, rows).unsqueeze(0), weight).squeeze(0),
                      row_stable_linear(x.narrow(0, 0, rows), weight)));
    }
    at::set_num_threads(1);
    CHECK(at::equal(row_stable_linear(x, weight, bias), all));
    at::set_num_threads(threads);
    // A strided input and a weight's columns: the same bits as their contiguous copies.
    CHECK(at::equal(row_stable_linear(x.t().contiguous().t(), weight, bias), all));
  }
  // Empty products and a one-dimensional input.
  CHECK(row_stable_linear(at::zeros({0, 4}), at::ones({3, 4})).sizes() == at::IntArrayRef({0, 3}));
  CHECK(at::equal(row_stable_linear(at::zeros({2, 0}), at::ones({3, 0}), at::ones({3})), at::ones({2, 3})));
  at::Tensor vector = at::randn({37}), weight = at::randn({5, 37});
  CHECK(at::equal(row_stable_linear(vector, weight), row_stable_linear(vector.unsqueeze(0), weight).squeeze(0)));
}

// Regression: ATen's sigmoid computed a tensor's last values (fewer than two vectors) on its scalar path, whose exp
// rounds apart, so a text's score changed in its last bit with the texts ranked beside it (8 probes: one text's 8
// values all scalar, two texts' 16 all vectorized).
TEST_CASE("row_stable_sigmoid and row_stable_softmax: each value the same whatever the values beside it" * doctest::test_suite("numeric")) {
  at::manual_seed(1);
  const at::Tensor logits = at::randn({40, 8}) * 6;
  const at::Tensor all = row_stable_sigmoid(logits), classes = row_stable_softmax(logits);
  const double u = std::ldexp(1.0, -24);
  // Ours round once from double; ATen's float sigmoid and softmax are within 2.1 and 17 units of the last place here.
  CHECK(((all - at::sigmoid(logits)).abs() <= 4 * u * all).all().item<bool>());
  CHECK(((classes - at::softmax(logits, -1)).abs() <= 32 * u * classes).all().item<bool>());
  for (int64_t rows : {1, 2, 3, 5, 40}) {
    for (int64_t first : {int64_t{0}, 40 - rows}) {
      CAPTURE(rows);
      CHECK(at::equal(row_stable_sigmoid(logits.narrow(0, first, rows)), all.narrow(0, first, rows)));
      CHECK(at::equal(row_stable_softmax(logits.narrow(0, first, rows)), classes.narrow(0, first, rows)));
    }
  }
  CHECK(at::equal(row_stable_sigmoid(logits.t()), all.t()));  // strided
  CHECK(at::equal(row_stable_sigmoid(at::tensor({-INFINITY, INFINITY})), at::tensor({0.0f, 1.0f})));
  CHECK(std::isnan(row_stable_sigmoid(at::tensor({NAN})).item<float>()));
}

