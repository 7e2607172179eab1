// The device layer's memory budget, out-of-memory retries and MPS messages, through an injected runtime that plays
// an Apple MPS machine (tests/fake_device_runtime.h) on this CPU-only one.
#include <doctest/doctest.h>

#include <stdexcept>

#include "cli/cli.h"
#include "common/error.h"
#include "device/runtime.h"
#include "fake_device_runtime.h"

using namespace probekit;
using namespace probekit::device;
using probekit::testing::apple_silicon_mac;

namespace {

constexpr uint64_t kGiB = 1ull << 30;

}  // namespace

TEST_CASE("on an Apple machine auto picks MPS, which computes in fp32 whatever dtype is asked") {
  testing::FakeDeviceRuntime mac = apple_silicon_mac();
  DeviceChoice device = choose_device("auto", mac.report());
  CHECK(device.backend == Backend::kMps);
  DTypeChoice dtype = choose_dtype("bf16", device, mac.report());
  CHECK(dtype.dtype == DType::kFloat32);
  CHECK(dtype.warning.find("--dtype bf16 is not supported on MPS") != std::string::npos);
}

TEST_CASE("the memory budget on MPS: the recommended working set less what the process holds, capped by --max-gpu-memory") {
  testing::FakeDeviceRuntime mac = apple_silicon_mac();
  mac.reading.free_bytes = 100 * kGiB;  // not an MPS figure: ignored there
  const auto weights = static_cast<int64_t>(2 * kGiB);
  MemoryBudget budget = memory_budget(Backend::kMps, mac.reading, 0, weights);
  CHECK(budget.bytes == 13 * kGiB);  // 16 GiB recommended - 3 GiB held (the weights among them)
  CHECK(budget.source == "MPS: 16.0 GiB recommended working set, 3.0 GiB held by this process");

  // --max-gpu-memory 8 GiB leaves 8 - 2 = 6 GiB beside the weights; a cap above what there is changes nothing.
  MemoryBudget capped = memory_budget(Backend::kMps, mac.reading, static_cast<int64_t>(8 * kGiB), weights);
  CHECK(capped.bytes == 6 * kGiB);
  CHECK(capped.source.find("--max-gpu-memory leaves 6.0 GiB beside the weights") != std::string::npos);
  CHECK(memory_budget(Backend::kMps, mac.reading, static_cast<int64_t>(20 * kGiB), weights).bytes == 13 * kGiB);
  try {
    memory_budget(Backend::kMps, mac.reading, static_cast<int64_t>(kGiB), weights);
    FAIL("expected a usage error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()) ==
          "--max-gpu-memory 1.0 GiB leaves no room for activations beside the model's 2.0 GiB of weights");
  }

  // Nothing left of the working set, or no figure (LibTorch before 2.5): unknown, so the capture keeps the CPU's
  // fixed token budget.
  mac.reading.allocated_bytes = 17 * kGiB;
  CHECK(memory_budget(Backend::kMps, mac.reading, 0, weights).bytes == 0);
  mac.reading.working_set_bytes = 0;
  CHECK(memory_budget(Backend::kMps, mac.reading, 0, weights).bytes == 0);

  // CUDA takes the driver's free memory; the CPU has no budget.
  MemoryReading gpu;
  gpu.free_bytes = 70 * kGiB;
  CHECK(memory_budget(Backend::kCuda, gpu, 0, weights).bytes == 70 * kGiB);
  CHECK(memory_budget(Backend::kCpu, gpu, static_cast<int64_t>(kGiB), weights).bytes == 0);
}

TEST_CASE("an out-of-memory batch on MPS is run in halves, the MPS cache cleared before each retry") {
  testing::FakeDeviceRuntime mac = apple_silicon_mac();
  OutOfMemoryRetry retry{mac, {DeviceChoice{Backend::kMps, 0, "auto"}}};
  std::vector<std::vector<int64_t>> ran;
  auto fits_two = [&ran](const std::vector<int64_t>& part) {
    if (part.size() > 2) throw std::runtime_error(testing::kMpsOutOfMemory);
    ran.push_back(part);
  };
  run_in_halves({0, 1, 2, 3, 4, 5, 6, 7}, fits_two, retry);
  // 8 fails, then each 4 fails: three splits, each after clearing the cache; the pieces run in order.
  CHECK(ran == std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(retry.retries == 3);
  CHECK(mac.cleared == std::vector<Backend>{Backend::kMps, Backend::kMps, Backend::kMps});

  // One example that does not fit: its error goes up, as does any error that is not about memory.
  auto never_fits = [](const std::vector<int64_t>&) { throw std::runtime_error(testing::kMpsOutOfMemory); };
  CHECK_THROWS_WITH_AS(run_in_halves({5}, never_fits, retry), doctest::Contains("MPS backend out of memory"),
                       std::runtime_error);
  auto bad_input = [](const std::vector<int64_t>&) { throw std::runtime_error("tensor 'x' has the wrong shape"); };
  CHECK_THROWS_WITH_AS(run_in_halves({0, 1}, bad_input, retry), "tensor 'x' has the wrong shape", std::runtime_error);
  CHECK(mac.cleared.size() == 3);

  CHECK(out_of_memory_retry_warning(Backend::kMps, 8) ==
        "out of MPS memory on a batch of 8 examples; retrying in smaller batches (to avoid the retries, lower "
        "--max-gpu-memory or set a smaller --batch-size)");
}

TEST_CASE("an out-of-memory batch of a model placed over two GPUs clears the cache of both before its retry") {
  testing::FakeDeviceRuntime machine;
  OutOfMemoryRetry retry{machine, {DeviceChoice{Backend::kCuda, 0, "--devices"}, DeviceChoice{Backend::kCuda, 1, "--devices"}}};
  std::vector<std::vector<int64_t>> ran;
  run_in_halves({0, 1}, [&ran](const std::vector<int64_t>& part) {
    if (part.size() > 1) throw std::runtime_error("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1)");
    ran.push_back(part);
  }, retry);
  CHECK(ran == std::vector<std::vector<int64_t>>{{0}, {1}});
  CHECK(retry.retries == 1);
  CHECK(machine.cleared == std::vector<Backend>{Backend::kCuda, Backend::kCuda});
  CHECK(machine.cleared_indices == std::vector<int>{0, 1});
}

TEST_CASE("MPS failures say what to do: the operator without a kernel and PYTORCH_ENABLE_MPS_FALLBACK, what to lower") {
  std::string missing = explain_failure(std::runtime_error(testing::kMpsMissingKernel));
  CHECK(missing.find("\nLibTorch has no MPS kernel for aten::_linalg_solve_ex.result: set PYTORCH_ENABLE_MPS_FALLBACK=1 "
                     "in the environment before starting the tool to compute that operator on the CPU (slower), or "
                     "use --device cpu.") != std::string::npos);

  std::string oom = explain_failure(std::runtime_error(testing::kMpsOutOfMemory));
  CHECK(oom.find("\nMPS ran out of memory: lower --max-gpu-memory or --batch-size, or cut long texts with "
                 "--max-length") != std::string::npos);
  CHECK(oom.find("a lower --dtype,") == std::string::npos);  // MPS is fp32 only
  std::string cuda_oom = explain_failure(std::runtime_error("CUDA out of memory. Tried to allocate 2.00 GiB"));
  CHECK(cuda_oom.find("a lower --dtype,") != std::string::npos);
  CHECK(mps_failure_advice("cannot open data.jsonl").empty());

  CHECK(mps_fallback_note(nullptr) ==
        "operators without an MPS kernel stop the run; PYTORCH_ENABLE_MPS_FALLBACK=1 runs them on the CPU instead");
  CHECK(mps_fallback_note("0") == mps_fallback_note(nullptr));
  CHECK(mps_fallback_note("1").find("PYTORCH_ENABLE_MPS_FALLBACK is set") == 0);
}
