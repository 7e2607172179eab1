#include "device/runtime.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <exception>

#include "common/error.h"
#include "common/units.h"

namespace probekit::device {

namespace {

// LibTorch's message for an operator without an MPS kernel names it as "The operator 'aten::name' is not ...".
const char* const kMissingMpsKernel = "is not currently implemented for the MPS device";

std::string missing_operator(const std::string& message) {
  const std::string opening = "The operator '";
  auto start = message.find(opening);
  auto end = start == std::string::npos ? start : message.find('\'', start + opening.size());
  if (end == std::string::npos) return "an operator";
  return message.substr(start + opening.size(), end - start - opening.size());
}

}  // namespace

MemoryBudget memory_budget(Backend backend, const MemoryReading& reading, int64_t max_gpu_memory, int64_t weight_bytes) {
  MemoryBudget budget;
  if (backend == Backend::kCuda || backend == Backend::kRocm) {
    budget.bytes = reading.free_bytes;
    budget.source = fmt::format("{:.1f} GiB free on the GPU", gib(reading.free_bytes));
  } else if (backend == Backend::kMps && reading.working_set_bytes > 0) {
    // The GPU shares the system's memory: Metal recommends a working set, of which the process holds a part.
    budget.bytes = reading.working_set_bytes - std::min(reading.working_set_bytes, reading.allocated_bytes);
    budget.source = fmt::format("MPS: {:.1f} GiB recommended working set, {:.1f} GiB held by this process",
                                gib(reading.working_set_bytes), gib(reading.allocated_bytes));
  } else {
    return budget;
  }
  if (max_gpu_memory > 0) {
    if (max_gpu_memory <= weight_bytes) {
      fail_usage("--max-gpu-memory {:.1f} GiB leaves no room for activations beside the model's {:.1f} GiB of weights",
                 gib(static_cast<uint64_t>(max_gpu_memory)), gib(static_cast<uint64_t>(weight_bytes)));
    }
    auto cap = static_cast<uint64_t>(max_gpu_memory - weight_bytes);
    if (cap < budget.bytes) {
      budget.bytes = cap;
      budget.source += fmt::format("; --max-gpu-memory leaves {:.1f} GiB beside the weights", gib(cap));
    }
  }
  return budget;
}

std::string out_of_memory_retry_warning(Backend backend, size_t batch_size) {
  if (backend == Backend::kMps) {
    return fmt::format("out of MPS memory on a batch of {} examples; retrying in smaller batches (to avoid the "
                       "retries, lower --max-gpu-memory or set a smaller --batch-size)",
                       batch_size);
  }
  return fmt::format("out of device memory on a batch of {} examples; retrying in smaller batches (to avoid the "
                     "retries, lower --max-gpu-memory or set a smaller --batch-size)",
                     batch_size);
}

void run_in_halves(const std::vector<int64_t>& batch, const std::function<void(const std::vector<int64_t>&)>& run,
                   OutOfMemoryRetry& retry) {
  try {
    run(batch);
    return;
  } catch (const std::exception& e) {
    if (!is_out_of_memory_message(e.what()) || batch.size() <= 1) throw;
  }
  for (const DeviceChoice& device : retry.devices) retry.runtime.empty_cache(device);
  if (retry.retries == 0) spdlog::warn("{}", out_of_memory_retry_warning(retry.devices.front().backend, batch.size()));
  ++retry.retries;
  auto half = static_cast<std::ptrdiff_t>(batch.size() / 2);
  run_in_halves({batch.begin(), batch.begin() + half}, run, retry);
  run_in_halves({batch.begin() + half, batch.end()}, run, retry);
}

bool is_out_of_memory_message(const std::string& message) {
  return message.find("out of memory") != std::string::npos || message.find("OutOfMemoryError") != std::string::npos;
}

std::string failure_advice(const std::string& message) {
  std::string mps_advice = mps_failure_advice(message);
  if (!mps_advice.empty()) return mps_advice;
  if (!is_out_of_memory_message(message)) return "";
  return "The device ran out of memory: use a smaller --batch-size (or --max-gpu-memory), a lower --dtype, or free "
         "memory used by other processes; the device and its memory are logged at start.";
}

std::string mps_failure_advice(const std::string& message) {
  if (message.find(kMissingMpsKernel) != std::string::npos) {
    return fmt::format("LibTorch has no MPS kernel for {}: set PYTORCH_ENABLE_MPS_FALLBACK=1 in the environment "
                       "before starting the tool to compute that operator on the CPU (slower), or use --device cpu.",
                       missing_operator(message));
  }
  if (message.find("MPS backend out of memory") != std::string::npos) {
    return "MPS ran out of memory: lower --max-gpu-memory or --batch-size, or cut long texts with --max-length (MPS "
           "computes in fp32, so a lower --dtype does not help); close programs that use much memory.";
  }
  return "";
}

std::string mps_fallback_note(const char* value) {
  // LibTorch enables the fallback for any value whose integer is not 0.
  bool enabled = value != nullptr && std::strtol(value, nullptr, 10) != 0;
  if (enabled) return "PYTORCH_ENABLE_MPS_FALLBACK is set: operators without an MPS kernel run on the CPU (slower)";
  return "operators without an MPS kernel stop the run; PYTORCH_ENABLE_MPS_FALLBACK=1 runs them on the CPU instead";
}

}  // namespace probekit::device
